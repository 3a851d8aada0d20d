/* A Service's pod for the node cluster of scripts/node-cluster (the "echo" image): an
 * HTTP/1.0 server on port 8080 that answers every request with the pod's name (its
 * hostname) and closes, so a client learns which pod answered. Built static (gcc
 * -static), the image's only file; no registry needed. Exits on SIGTERM/SIGINT. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

int main(void) {
  struct sigaction stop = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGINT, &stop, NULL);
  sigaction(SIGTERM, &stop, NULL);
  signal(SIGPIPE, SIG_IGN);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char reply[512];
  int len = snprintf(reply, sizeof reply,
                     "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s\n",
                     strlen(host) + 1, host);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(8080);
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(s, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(s, 64) != 0) {
    perror("echo: bind/listen :8080");
    return 1;
  }
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    char buf[1024];
    (void)read(c, buf, sizeof buf); /* the request line; its content does not matter */
    (void)write(c, reply, (size_t)len);
    close(c);
  }
}
