// ClientConnection: notices that the client of an HTTP request hung up while
// the request's handler is still waiting (a non-streaming completion waits for
// the whole generation before it writes anything).
//
// cpp-httplib 0.11 gives a handler neither its socket nor a connection-state
// hook, and a handler that only learns of a hang-up when it writes its
// response lets an abandoned request run to max_tokens. A request does carry
// its connection's two endpoints (Request::local_addr/local_port and
// remote_addr/remote_port), and those name exactly one connected TCP socket of
// this process: Find looks it up once among the process's file descriptors
// (/proc/self/fd), and Closed() then polls it without consuming anything.
//
// Lifetime and threading: the descriptor belongs to httplib. It is this
// connection's only while the request's handler runs (httplib's worker closes
// it after the handler returned and the response was written), so use a
// ClientConnection only from inside that handler. Nothing is read, written or
// closed through it. Thread-compatible.
#pragma once

#include <string>

#include "runtime/base/status.h"

namespace xrt {
namespace server {

class ClientConnection {
 public:
  // The connected TCP socket of this process whose local and peer endpoints
  // are these (hosts in numeric form, as getnameinfo(NI_NUMERICHOST) writes
  // them, which is what httplib puts in a Request). NotFound if there is none;
  // Unavailable if the process's descriptors cannot be listed.
  [[nodiscard]] static Expected<ClientConnection> Find(const std::string& local_addr,
                                                       int local_port,
                                                       const std::string& remote_addr,
                                                       int remote_port);

  // True once the client closed or reset the connection: the socket is
  // readable and reads end-of-stream or an error. Bytes the client did send (a
  // pipelined request) are left unread and mean it is still there. A client
  // that only shuts down its sending side counts as gone, as in httplib's own
  // DataSink::is_writable. Never blocks.
  bool Closed() const;

  int fd() const { return fd_; }

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace server
}  // namespace xrt
