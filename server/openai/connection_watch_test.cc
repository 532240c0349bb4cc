#include "server/openai/connection_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace expertd::server::openai {
namespace {

struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  int fd[2] = {-1, -1};
};

TEST(ConnectionWatchTest, OpenIdleConnectionIsNotClosed) {
  SocketPair s;
  EXPECT_FALSE(PeerClosed(s.fd[0]));
}

TEST(ConnectionWatchTest, PendingBytesAreNotAClose) {
  SocketPair s;
  ASSERT_EQ(write(s.fd[1], "GET", 3), 3);
  EXPECT_FALSE(PeerClosed(s.fd[0]));
  char buf[3];
  EXPECT_EQ(read(s.fd[0], buf, 3), 3);  // the peek consumed nothing
}

TEST(ConnectionWatchTest, PeerCloseIsSeenEvenWithUnreadBytes) {
  SocketPair s;
  ASSERT_EQ(write(s.fd[1], "x", 1), 1);
  close(s.fd[1]);
  s.fd[1] = -1;
  EXPECT_TRUE(PeerClosed(s.fd[0]));
}

TEST(ConnectionWatchTest, PeerShutdownOfItsSendingSideCounts) {
  SocketPair s;
  ASSERT_EQ(shutdown(s.fd[1], SHUT_WR), 0);
  EXPECT_TRUE(PeerClosed(s.fd[0]));
}

TEST(ConnectionWatchTest, NoSocketIsNeverClosed) { EXPECT_FALSE(PeerClosed(-1)); }

int Port(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  EXPECT_EQ(peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                 : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len),
            0);
  return ntohs(a.sin_port);
}

TEST(ConnectionWatchTest, FindsTheServerSideSocketOfATcpConnection) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  const int server_port = Port(listener, false);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  addr.sin_port = htons(server_port);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  const int client_port = Port(client, false);

  EXPECT_EQ(ConnectionSocket("127.0.0.1", client_port, server_port), accepted);
  // The client's own socket has the ports the other way round.
  EXPECT_EQ(ConnectionSocket("127.0.0.1", server_port, client_port), client);
  EXPECT_EQ(ConnectionSocket("127.0.0.2", client_port, server_port), -1);
  EXPECT_EQ(ConnectionSocket("127.0.0.1", client_port + 1, server_port), -1);
  EXPECT_EQ(ConnectionSocket("127.0.0.1", -1, server_port), -1);

  EXPECT_FALSE(PeerClosed(accepted));
  close(client);
  EXPECT_TRUE(PeerClosed(accepted));
  close(accepted);
  close(listener);
}

}  // namespace
}  // namespace expertd::server::openai
