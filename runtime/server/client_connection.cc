#include "runtime/server/client_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace xrt {
namespace server {

namespace {

// Whether a socket address is host:port, the host compared in the numeric
// form httplib uses for Request::remote_addr/local_addr.
bool IsEndpoint(const sockaddr_storage& addr, socklen_t len, const std::string& host, int port) {
  int addr_port = -1;
  if (addr.ss_family == AF_INET)
    addr_port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  else if (addr.ss_family == AF_INET6)
    addr_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  if (addr_port != port) return false;
  char text[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, text, sizeof(text), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  return host == text;
}

}  // namespace

Expected<ClientConnection> ClientConnection::Find(const std::string& local_addr, int local_port,
                                                  const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return UnavailableError("cannot list /proc/self/fd: {}", std::strerror(errno));
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    // Not a socket, or not connected: getpeername fails.
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    if (!IsEndpoint(addr, len, remote_addr, remote_port)) continue;
    len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    if (!IsEndpoint(addr, len, local_addr, local_port)) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  if (found < 0)
    return NotFoundError("no socket of this process connects {}:{} to {}:{}", local_addr,
                         local_port, remote_addr, remote_port);
  return ClientConnection(found);
}

bool ClientConnection::Closed() const {
  pollfd p = {fd_, POLLIN, 0};
  int ready = ::poll(&p, 1, 0);
  if (ready <= 0) return false;  // nothing to read: still there (or EINTR: ask again later)
  if (p.revents & POLLNVAL) return true;
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;  // end-of-stream: the client closed its side
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset
}

}  // namespace server
}  // namespace xrt
