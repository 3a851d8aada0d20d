/* The pod sandbox's process (the "pause" image), for the real-node cluster of
 * scripts/node-cluster: holds the pod's namespaces open, exits on SIGINT/SIGTERM,
 * reaps orphans re-parented to it. Built static (gcc -static), the image's only file. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0}, child = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGINT, &stop, NULL);
  sigaction(SIGTERM, &stop, NULL);
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &child, NULL);
  for (;;) {
    pause();
  }
}
