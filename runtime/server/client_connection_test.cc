#include "runtime/server/client_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace xrt::server {
namespace {

// A loopback TCP connection: `server` is the accepted end, `client` the other.
struct Connection {
  int server = -1, client = -1;
  int server_port = 0, client_port = 0;
  ~Connection() {
    if (server >= 0) close(server);
    if (client >= 0) close(client);
  }
};

int LocalPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  return ntohs(a.sin_port);
}

void Connect(Connection* c) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  c->client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c->client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  c->server = accept(listener, nullptr, nullptr);
  close(listener);
  ASSERT_GE(c->server, 0);
  c->server_port = LocalPort(c->server);
  c->client_port = LocalPort(c->client);
}

// Polls Closed() for up to a second (a close travels through the loopback).
bool BecomesClosed(const ClientConnection& c) {
  for (int i = 0; i < 100; ++i) {
    if (c.Closed()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(ClientConnectionTest, FindsTheAcceptedSocketByItsEndpoints) {
  Connection c;
  ASSERT_NO_FATAL_FAILURE(Connect(&c));
  // Seen from the accepting side: local = the server port, remote = the client.
  auto found = ClientConnection::Find("127.0.0.1", c.server_port, "127.0.0.1", c.client_port);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->fd(), c.server);
  // And from the connecting side, the other socket.
  auto other = ClientConnection::Find("127.0.0.1", c.client_port, "127.0.0.1", c.server_port);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->fd(), c.client);
}

TEST(ClientConnectionTest, UnknownEndpointsAreNotFound) {
  Connection c;
  ASSERT_NO_FATAL_FAILURE(Connect(&c));
  auto wrong_port = ClientConnection::Find("127.0.0.1", c.server_port, "127.0.0.1", c.server_port);
  ASSERT_FALSE(wrong_port.ok());
  EXPECT_EQ(wrong_port.status().code(), StatusCode::kNotFound);
  EXPECT_NE(wrong_port.status().message().find(std::to_string(c.server_port)), std::string::npos);
  auto wrong_host = ClientConnection::Find("127.0.0.2", c.server_port, "127.0.0.1", c.client_port);
  EXPECT_FALSE(wrong_host.ok());
}

TEST(ClientConnectionTest, OpenWhileTheClientWaitsOrSendsMore) {
  Connection c;
  ASSERT_NO_FATAL_FAILURE(Connect(&c));
  auto conn = ClientConnection::Find("127.0.0.1", c.server_port, "127.0.0.1", c.client_port);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_FALSE(conn->Closed());
  // A pipelined request is data, not a hang-up, and stays unread.
  ASSERT_EQ(send(c.client, "GET", 3, 0), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(conn->Closed());
  char buf[8] = {};
  EXPECT_EQ(recv(c.server, buf, sizeof(buf), MSG_DONTWAIT), 3);
  EXPECT_EQ(std::string(buf, 3), "GET");
  EXPECT_FALSE(conn->Closed());
}

TEST(ClientConnectionTest, ClosedOnceTheClientClosesOrResets) {
  {
    Connection c;
    ASSERT_NO_FATAL_FAILURE(Connect(&c));
    auto conn = ClientConnection::Find("127.0.0.1", c.server_port, "127.0.0.1", c.client_port);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    close(c.client);
    c.client = -1;
    EXPECT_TRUE(BecomesClosed(*conn));
  }
  {
    Connection c;
    ASSERT_NO_FATAL_FAILURE(Connect(&c));
    auto conn = ClientConnection::Find("127.0.0.1", c.server_port, "127.0.0.1", c.client_port);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    linger reset = {1, 0};  // close with RST instead of FIN
    ASSERT_EQ(setsockopt(c.client, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)), 0);
    close(c.client);
    c.client = -1;
    EXPECT_TRUE(BecomesClosed(*conn));
  }
}

}  // namespace
}  // namespace xrt::server
