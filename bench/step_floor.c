/* The floor for the simulator benchmark: only what any step-loop server must do.
 *
 * A C program that does, for 512 streams on one core, the part of the
 * simulator's work that no implementation can avoid: every step (an absolute
 * deadline, STEP_S apart, with the simulator's catch-up rule) it writes one
 * SSE chunk of the simulator's size to every streaming connection, one
 * write(2) per connection; after TOKENS chunks a stream ends with [DONE] and
 * the connection's next request starts a new one. No JSON, no engine, no
 * Python. It records each step's wake-up lateness exactly as the simulator
 * does (wake-up time minus deadline) and prints, on SIGTERM:
 *
 *   steps N lag_p50_s X lag_p99_s Y cpu_s Z
 *
 * bench/bench_sim_throughput.py --server floor runs it with the same client,
 * so the simulator's scheduling lag can be read against what this machine
 * allows at the same chunk rate.
 *
 * EXTRA_S (optional) adds a fixed amount of CPU work to every step — calibrated at
 * start to take EXTRA_S on a quiet core, walking a 4 MiB buffer like an interpreter
 * walks its objects — to find how much work per step this machine lets a step loop
 * do before its lag p99 grows (a slow patch of the machine slows this work too).
 *
 *   cc -O2 -o /tmp/step_floor bench/step_floor.c
 *   /tmp/step_floor PORT STEP_S TOKENS [EXTRA_S]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAXC 8192
#define MAXSTEPS 1000000
typedef struct { int streaming; int sent; int inlen; char in[8192]; } Conn;
static Conn *conns[MAXC];
static double lags[MAXSTEPS];
static int nsteps;
static volatile sig_atomic_t stop;

static unsigned char work_buf[4 << 20];
static volatile unsigned long work_sink;
static void work(long long units) {
  unsigned long s = 0, idx = 0;
  for (long long i = 0; i < units; i++) { idx = (idx + 4160) & ((4u << 20) - 1); s += work_buf[idx]; work_buf[idx] = (unsigned char)s; }
  work_sink = s;
}
static long long now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static void on_term(int sig) { (void)sig; stop = 1; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* One token chunk shaped and sized like the simulator's (chunked framing included). */
static char CHUNK[1024], LAST[1024];
static int chunk_len, last_len;
static const char HEAD[] = "HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n";

static int frame(char *out, const char *finish, int done) {
  char data[768];
  int n = snprintf(data, sizeof data,
                   "data: {\"id\":\"chatcmpl-00000000000000a1\",\"object\":\"chat.completion.chunk\",\"created\":1764400000,"
                   "\"model\":\"moonshotai/Kimi-K2.5\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\" consider\"},"
                   "\"logprobs\":null,\"finish_reason\":%s,\"token_ids\":null}]}\n\n",
                   finish);
  int m = sprintf(out, "%x\r\n%s\r\n", n, data);
  if (done) m += sprintf(out + m, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
  return m;
}

static void close_conn(int ep, int fd) { epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); close(fd); free(conns[fd]); conns[fd] = NULL; }

static void on_read(int ep, int fd) {
  Conn *c = conns[fd];
  for (;;) {
    int n = (int)read(fd, c->in + c->inlen, sizeof c->in - 1 - (size_t)c->inlen);
    if (n == 0 || (n < 0 && errno != EAGAIN)) { close_conn(ep, fd); return; }
    if (n < 0) return;
    c->inlen += n;
    for (;;) {
      c->in[c->inlen] = 0;
      char *end = memmem(c->in, (size_t)c->inlen, "\r\n\r\n", 4);
      if (!end) break;
      int head = (int)(end - c->in) + 4, len = 0;
      char *cl = strcasestr(c->in, "content-length:");
      if (cl && cl < end) len = atoi(cl + 15);
      if (c->inlen < head + len) break;
      memmove(c->in, c->in + head + len, (size_t)(c->inlen - head - len));
      c->inlen -= head + len;
      if (write(fd, HEAD, sizeof HEAD - 1) < 0) { close_conn(ep, fd); return; }
      c->streaming = 1; c->sent = 0;
    }
    if (c->inlen >= (int)sizeof c->in - 1) { close_conn(ep, fd); return; }
  }
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s PORT STEP_S TOKENS\n", argv[0]); return 2; }
  int port = atoi(argv[1]), tokens = atoi(argv[3]);
  long long step_ns = (long long)(atof(argv[2]) * 1e9);
  long long extra_ns = argc > 4 ? (long long)(atof(argv[4]) * 1e9) : 0, extra_units = 0;
  if (extra_ns) { /* calibrate: units of work per extra_ns, best of 20 tries */
    long long best = -1;
    for (int k = 0; k < 20; k++) { long long t = now_ns(); work(1000000); long long d = now_ns() - t; if (best < 0 || d < best) best = d; }
    extra_units = (long long)(1000000.0 * (double)extra_ns / (double)best);
  }
  chunk_len = frame(CHUNK, "null", 0);
  last_len = frame(LAST, "\"length\"", 1);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0}; sa.sa_handler = on_term; sigaction(SIGTERM, &sa, NULL); sigaction(SIGINT, &sa, NULL);
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4096) < 0) { perror("bind"); return 1; }
  int ep = epoll_create1(0), tf = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  ev.data.fd = tf; epoll_ctl(ep, EPOLL_CTL_ADD, tf, &ev);
  printf("listening on 127.0.0.1:%d\n", port); fflush(stdout);
  struct epoll_event evs[1024];
  long long deadline = now_ns() + step_ns;
  struct itimerspec its = {0};
  its.it_value.tv_sec = deadline / 1000000000LL; its.it_value.tv_nsec = deadline % 1000000000LL;
  timerfd_settime(tf, TFD_TIMER_ABSTIME, &its, NULL);
  while (!stop) {
    int n = epoll_wait(ep, evs, 1024, 100);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == ls) {
        int c;
        while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          if (c >= MAXC) { close(c); continue; }
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conns[c] = calloc(1, sizeof(Conn));
          struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        }
      } else if (fd == tf) {
        unsigned long long x;
        if (read(tf, &x, sizeof x) < 0) continue;
        long long woke = now_ns();
        if (nsteps < MAXSTEPS) lags[nsteps++] = woke > deadline ? (double)(woke - deadline) / 1e9 : 0.0;
        for (int c = 0; c < MAXC; c++) {
          Conn *k = conns[c];
          if (!k || !k->streaming) continue;
          int last = ++k->sent >= tokens;
          const char *buf = last ? LAST : CHUNK;
          int len = last ? last_len : chunk_len;
          if (write(c, buf, (size_t)len) != len) { close_conn(ep, c); continue; }
          if (last) k->streaming = 0;
        }
        if (extra_units) work(extra_units);
        /* The simulator's rule: keep the cadence unless more than 0.2 s late. */
        long long start = woke - deadline > 200000000LL ? woke : deadline;
        deadline = start + step_ns;
        its.it_value.tv_sec = deadline / 1000000000LL; its.it_value.tv_nsec = deadline % 1000000000LL;
        timerfd_settime(tf, TFD_TIMER_ABSTIME, &its, NULL);
      } else if (conns[fd]) {
        on_read(ep, fd);
      }
    }
  }
  qsort(lags, (size_t)nsteps, sizeof lags[0], cmp);
  struct rusage ru; getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  printf("steps %d lag_p50_s %.6f lag_p99_s %.6f cpu_s %.3f\n", nsteps,
         nsteps ? lags[nsteps / 2] : 0.0, nsteps ? lags[(int)(0.99 * nsteps)] : 0.0, cpu);
  return 0;
}
