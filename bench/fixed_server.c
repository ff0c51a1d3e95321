/* A fixed-timing OpenAI-compatible streaming server in C, for benchmarking the client.
 *
 * Same wire format and schedule as bench/fixed_server.py (vLLM chunk shape,
 * continuous usage on every chunk, role chunk, final usage chunk, [DONE]),
 * but cheap enough that one core serves 512 streams at 5 ms ITL on time:
 * epoll + one absolute timerfd + a binary heap of due times.
 *
 *   cc -O2 -o /tmp/fixed_server bench/fixed_server.c
 *   /tmp/fixed_server PORT TTFT_S ITL_S TOKENS TOKENS_PER_CHUNK [METRICS]
 *
 * METRICS 1: the final usage chunk carries vLLM 0.32's per-request timing
 * (--enable-per-request-metrics: metrics.time_to_first_token_ms, generation_time_ms,
 * queue_time_ms, mean_itl_ms, tokens_per_second) from this server's own clock: the
 * request parsed, the first and the last token chunk written (queue 0).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAXC 65536
typedef struct { int fd; int idx; long long gen; long long due; char in[8192]; int inlen; int streaming; long long t_req, t_first; } Conn;
static Conn *conns[MAXC];
static char **chunks; static int *chunk_len; static int nchunks;
static long long heap_due[MAXC], heap_gen[MAXC]; static int heap_fd[MAXC]; static int heap_n; static long long next_gen;
static long long ttft_ns, itl_ns;
static int with_metrics, total_tokens;
static const char *BASE = "\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"fixed-timing\"";

static long long now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }

static void heap_push(long long due, int fd, long long gen) {
  int i = heap_n++;
  while (i > 0) { int p = (i - 1) / 2; if (heap_due[p] <= due) break; heap_due[i] = heap_due[p]; heap_fd[i] = heap_fd[p]; heap_gen[i] = heap_gen[p]; i = p; }
  heap_due[i] = due; heap_fd[i] = fd; heap_gen[i] = gen;
}
static void heap_pop(void) {
  long long due = heap_due[--heap_n], gen = heap_gen[heap_n]; int fd = heap_fd[heap_n]; int i = 0;
  for (;;) { int c = 2 * i + 1; if (c >= heap_n) break; if (c + 1 < heap_n && heap_due[c + 1] < heap_due[c]) c++;
    if (heap_due[c] >= due) break;
    heap_due[i] = heap_due[c]; heap_fd[i] = heap_fd[c]; heap_gen[i] = heap_gen[c]; i = c; }
  heap_due[i] = due; heap_fd[i] = fd; heap_gen[i] = gen;
}

static char *add_chunk(char *p, const char *json) {
  char data[4096]; int n = snprintf(data, sizeof data, "data: %s\n\n", json);
  return p + sprintf(p, "%x\r\n%s\r\n", n, data);
}

static void build(int tokens, int per) {
  nchunks = (tokens + per - 1) / per;
  chunks = calloc(nchunks, sizeof(char *)); chunk_len = calloc(nchunks, sizeof(int));
  const char *base = BASE;
  int sent = 0;
  for (int i = 0; i < nchunks; i++) {
    char *buf = malloc(16384), *p = buf, json[4096], text[2048] = "";
    int k = tokens - sent < per ? tokens - sent : per; sent += k;
    for (int j = 0; j < k; j++) strcat(text, " tok");
    if (i == 0) { snprintf(json, sizeof json, "{%s,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":0,\"total_tokens\":16}}", base); p = add_chunk(p, json); }
    snprintf(json, sizeof json, "{%s,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"finish_reason\":%s}],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d,\"total_tokens\":%d}}",
             base, text, i == nchunks - 1 ? "\"length\"" : "null", sent, 16 + sent);
    p = add_chunk(p, json);
    if (i == nchunks - 1 && !with_metrics) {
      snprintf(json, sizeof json, "{%s,\"choices\":[],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d,\"total_tokens\":%d}}", base, sent, 16 + sent);
      p = add_chunk(p, json);
      p += sprintf(p, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
    }
    chunks[i] = buf; chunk_len[i] = (int)(p - buf);
  }
}

/* The end of a stream with its timing: the usage chunk with metrics, [DONE], the last frame. */
static int write_tail(int fd, const Conn *c, long long t_last) {
  char json[1024], out[8192], *p = out;
  double ttft_ms = (c->t_first - c->t_req) / 1e6, gen_ms = (t_last - c->t_first) / 1e6;
  double itl_ms = total_tokens > 1 ? gen_ms / (total_tokens - 1) : 0.0;
  double tps = t_last > c->t_req ? total_tokens / ((t_last - c->t_req) / 1e9) : 0.0;
  snprintf(json, sizeof json, "{%s,\"choices\":[],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d,\"total_tokens\":%d},"
           "\"metrics\":{\"time_to_first_token_ms\":%.6f,\"generation_time_ms\":%.6f,\"queue_time_ms\":0.0,\"mean_itl_ms\":%.6f,\"tokens_per_second\":%.6f}}",
           BASE, total_tokens, 16 + total_tokens, ttft_ms, gen_ms, itl_ms, tps);
  p = add_chunk(p, json);
  p += sprintf(p, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
  return write(fd, out, p - out) == p - out;
}

static const char HEAD[] = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n";
static const char MODELS[] = "{\"object\":\"list\",\"data\":[{\"id\":\"fixed-timing\",\"object\":\"model\"}]}";

static void close_conn(int ep, int fd) { epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); close(fd); free(conns[fd]); conns[fd] = NULL; }

static void on_read(int ep, int fd) {
  Conn *c = conns[fd];
  for (;;) {
    int n = read(fd, c->in + c->inlen, sizeof c->in - 1 - c->inlen);
    if (n == 0 || (n < 0 && errno != EAGAIN)) { close_conn(ep, fd); return; }
    if (n < 0) break;
    c->inlen += n;
    for (;;) {
      c->in[c->inlen] = 0;
      char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
      if (!end) break;
      int head = (int)(end - c->in) + 4, len = 0;
      char *cl = strcasestr(c->in, "content-length:");
      if (cl && cl < end) len = atoi(cl + 15);
      if (c->inlen < head + len) break;
      int models = memmem(c->in, head, "/models", 7) != NULL;
      memmove(c->in, c->in + head + len, c->inlen - head - len); c->inlen -= head + len;
      if (models) {
        char out[512]; int m = snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n\r\n%s", strlen(MODELS), MODELS);
        if (write(fd, out, m) < 0) { close_conn(ep, fd); return; }
      } else {
        if (write(fd, HEAD, sizeof HEAD - 1) < 0) { close_conn(ep, fd); return; }
        c->streaming = 1; c->idx = 0; c->gen = ++next_gen; c->t_req = now_ns(); c->due = c->t_req + ttft_ns; heap_push(c->due, fd, c->gen);
      }
    }
    if (c->inlen >= (int)sizeof c->in - 1) { close_conn(ep, fd); return; }
  }
}

int main(int argc, char **argv) {
  if (argc < 6) { fprintf(stderr, "usage: %s PORT TTFT_S ITL_S TOKENS TOKENS_PER_CHUNK [METRICS]\n", argv[0]); return 2; }
  int port = atoi(argv[1]); ttft_ns = (long long)(atof(argv[2]) * 1e9); itl_ns = (long long)(atof(argv[3]) * 1e9);
  with_metrics = argc > 6 && atoi(argv[6]) == 1; total_tokens = atoi(argv[4]);
  build(total_tokens, atoi(argv[5]));
  signal(SIGPIPE, SIG_IGN);
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)}; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4096) < 0) { perror("bind"); return 1; }
  int ep = epoll_create1(0), tf = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}; epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  ev.data.fd = tf; epoll_ctl(ep, EPOLL_CTL_ADD, tf, &ev);
  printf("listening on 127.0.0.1:%d\n", port); fflush(stdout);
  struct epoll_event evs[1024]; long long armed = -1;
  for (;;) {
    if (heap_n && heap_due[0] != armed) {
      struct itimerspec its = {0}; its.it_value.tv_sec = heap_due[0] / 1000000000LL; its.it_value.tv_nsec = heap_due[0] % 1000000000LL;
      timerfd_settime(tf, TFD_TIMER_ABSTIME, &its, NULL); armed = heap_due[0];
    }
    int n = epoll_wait(ep, evs, 1024, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == ls) {
        int c; while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          if (c >= MAXC) { close(c); continue; }
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conns[c] = calloc(1, sizeof(Conn)); conns[c]->fd = c;
          struct epoll_event e = {.events = EPOLLIN, .data.fd = c}; epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        }
      } else if (fd == tf) {
        unsigned long long x; if (read(tf, &x, sizeof x) < 0) {} armed = -1;
      } else if (conns[fd]) on_read(ep, fd);
    }
    long long now = now_ns();
    while (heap_n && heap_due[0] <= now) {
      int fd = heap_fd[0]; long long due = heap_due[0], gen = heap_gen[0]; heap_pop();
      Conn *c = conns[fd]; if (!c || !c->streaming || c->gen != gen) continue;
      long long wrote = with_metrics ? now_ns() : 0;
      if (write(fd, chunks[c->idx], chunk_len[c->idx]) != chunk_len[c->idx]) { close_conn(ep, fd); continue; }
      if (c->idx == 0) c->t_first = wrote;
      if (++c->idx < nchunks) heap_push(due + itl_ns, fd, gen);
      else {
        c->streaming = 0;
        if (with_metrics && !write_tail(fd, c, wrote)) close_conn(ep, fd);
      }
    }
  }
}
