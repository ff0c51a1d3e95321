/* specload.load._fastpath: the per-read fast path of the load generator, in C.
 *
 * MeterCore holds the state of one streamed chat completion (the fields of
 * specload.load.meter.StreamMeter, whose Python methods run on top of it) and
 * MeterCore.feed_read(buf, n, now) accounts one socket read of a chunked SSE
 * body in a single pass: HTTP/1.1 chunk framing, SSE ``data:`` events, and
 * the few fields of each chat-completion-chunk JSON that the meter needs (the
 * channels: delta.reasoning / reasoning_content, delta.content, delta.tool_calls).
 *
 * The fast path is exact or declines: the read is first scanned and fully
 * validated (strict JSON grammar, UTF-8, no duplicate keys that matter, each
 * chunk made of whole single-line events); only then is the meter updated,
 * with the same arithmetic as StreamMeter.feed. Anything it cannot read with
 * certainty returns 0 with nothing changed, and the caller hands the read to
 * the full parsers (ChunkedDecoder, SSEDecoder, orjson). That includes usage the
 * meter would refuse (MalformedUsage: a count that is not a non-negative integer,
 * details that are not an object, a cumulative count going down or beyond
 * token_limit): the full path then raises, with the same detail, at that chunk.
 *
 * Return: 0 declined (nothing consumed), 1 consumed, 2 consumed and the
 * chunked body ended (the last chunk, "0\r\n\r\n", closed the read; anything
 * else after a zero size, trailers included, is declined to ChunkedDecoder),
 * 3 consumed and the stream ended at [DONE] while its body did not (what
 * followed [DONE] in the read is not accounted: a stream ends there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* prompt_tokens beyond this are not a count: specload.load.meter.MAX_PROMPT_TOKENS. */
#define MAX_PROMPT_TOKENS 1000000000LL

/* The meter's fields, the C side of specload.load.meter.CoreState (one annotation
 * per field there; a unit test compares that list with this type's members, names
 * and kinds). The struct, its members and the GC's traverse and clear are all made
 * from these two lists: X(C type, member type, name) and X(name) for objects. */
#define METER_SCALARS(X)                                                               \
    X(double, T_DOUBLE, t0)                                                            \
    X(double, T_DOUBLE, _last_t)                                                       \
    X(long long, T_LONGLONG, token_limit) /* completion tokens beyond: declined */     \
    X(long long, T_LONGLONG, _prev_cum)                                                \
    X(long long, T_LONGLONG, tokens_reasoning_exact)                                   \
    X(long long, T_LONGLONG, tokens_content_exact)                                     \
    X(long long, T_LONGLONG, tokens_tool_exact)                                        \
    X(long long, T_LONGLONG, unattributed)                                             \
    X(long long, T_LONGLONG, _pending_tokens)                                          \
    X(long long, T_LONGLONG, tokens_textless) /* after the first text: no chunk of theirs */ \
    X(long long, T_LONGLONG, chunks_reasoning)                                         \
    X(long long, T_LONGLONG, chunks_content)                                           \
    X(long long, T_LONGLONG, chunks_tool)                                              \
    X(int, T_INT, last_channel)                                                        \
    X(char, T_BOOL, done)                                                              \
    X(char, T_BOOL, continuous)                                                        \
    X(char, T_BOOL, has_content_text)                                                  \
    X(char, T_BOOL, want_text)                                                         \
    X(char, T_BOOL, sse_pending)

#define METER_OBJECTS(X) \
    X(first_t)           \
    X(last_event_t)      \
    X(first_content_t)   \
    X(finish_reason)     \
    X(_usage)            \
    X(_gaps)             \
    X(_chunk_tokens)     \
    X(_mixed)            \
    X(_text_reasoning)   \
    X(_text_content)     \
    X(_text_tool)        \
    X(_spec)

#define SCALAR_FIELD(ctype, member_type, name) ctype name;
#define OBJECT_FIELD(name) PyObject *name;
typedef struct {
    PyObject_HEAD
    METER_SCALARS(SCALAR_FIELD)
    METER_OBJECTS(OBJECT_FIELD)
} MeterCore;
#undef SCALAR_FIELD
#undef OBJECT_FIELD

#define MAX_EVENTS 64
#define MAX_DEPTH 32

typedef struct {
    int done;             /* the payload is [DONE] */
    int choices_none;     /* "choices" absent or null */
    int choices_truthy;   /* a non-empty array */
    int usage_none;       /* "usage" absent or null */
    int usage_truthy;     /* a non-empty object */
    const char *usage_p;  /* the usage object's bytes */
    Py_ssize_t usage_n;
    int cum_present;      /* usage.completion_tokens is an integer */
    long long cum;
    int prompt_present;   /* usage.prompt_tokens is an integer */
    long long prompt;
    int rt_present;       /* usage.completion_tokens_details.reasoning_tokens is an integer */
    long long rt;
    int reasoning_text;   /* bool(delta.reasoning if not None else delta.reasoning_content) */
    int content_text;     /* bool(delta.content) */
    int reasoning_content_text;
    int tool_text;        /* delta.tool_calls is a non-empty list of calls (checked) */
    const char *fr_p;     /* choices[0].finish_reason, a string (NULL: absent or null) */
    Py_ssize_t fr_n;
} Event;

/* ---------------------------------------------------------------- JSON -- */

typedef struct {
    const char *p;
    const char *end;
} Cursor;

static inline void skip_ws(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static inline int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Bytes that may appear as-is in a JSON string, ASCII only: 0x20-0x7F but '"' and '\'. */
static unsigned char plain_byte[256];

static void init_tables(void) {
    for (int i = 0; i < 256; i++) plain_byte[i] = i >= 0x20 && i < 0x80 && i != '"' && i != '\\';
}

/* A string at c->p (on the opening quote). Sets start and len to the raw bytes
 * between the quotes, and *escaped if it holds a backslash. Returns 0 if it is
 * not certainly valid (control chars, bad escapes, lone surrogates, bad UTF-8). */
static int scan_string_esc(Cursor *c, const char **start, Py_ssize_t *len, int *escaped) {
    const unsigned char *p = (const unsigned char *)c->p + 1;
    const unsigned char *end = (const unsigned char *)c->end;
    const unsigned char *s = p;
    int esc = 0;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: stop at '"', '\\', a control byte or a non-ASCII byte
         * (signed compare: bytes >= 0x80 are negative, so "< 0x20" catches both). */
        {
            const __m128i quote = _mm_set1_epi8('"');
            const __m128i bslash = _mm_set1_epi8('\\');
            const __m128i space = _mm_set1_epi8(0x20);
            while (p + 16 <= end) {
                __m128i v = _mm_loadu_si128((const __m128i *)p);
                __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote),
                                                      _mm_cmpeq_epi8(v, bslash)),
                                         _mm_cmplt_epi8(v, space));
                int mask = _mm_movemask_epi8(m);
                if (mask) {
                    p += __builtin_ctz((unsigned)mask);
                    break;
                }
                p += 16;
            }
        }
#endif
        while (p < end && plain_byte[*p]) p++;
        if (p >= end) return 0;
        unsigned char ch = *p;
        if (ch == '"') {
            *start = (const char *)s;
            *len = (Py_ssize_t)(p - s);
            *escaped = esc;
            c->p = (const char *)p + 1;
            return 1;
        }
        if (ch < 0x20) return 0;
        if (ch == '\\') {
            esc = 1;
            if (p + 1 >= end) return 0;
            unsigned char e = p[1];
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            if (e == 'u') {
                if (p + 6 > end) return 0;
                int v = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hexval((char)p[i]);
                    if (h < 0) return 0;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return 0; /* surrogates: let orjson judge */
                p += 6;
                continue;
            }
            return 0;
        }
        /* ch >= 0x80: strict UTF-8 (RFC 3629) */
        if (ch >= 0xC2 && ch <= 0xDF) {
            if (p + 1 >= end || (p[1] & 0xC0) != 0x80) return 0;
            p += 2;
        } else if (ch >= 0xE0 && ch <= 0xEF) {
            if (p + 2 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
            if (ch == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
            if (ch == 0xED && p[1] > 0x9F) return 0;  /* surrogate */
            p += 3;
        } else if (ch >= 0xF0 && ch <= 0xF4) {
            if (p + 3 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
                (p[3] & 0xC0) != 0x80)
                return 0;
            if (ch == 0xF0 && p[1] < 0x90) return 0;  /* overlong */
            if (ch == 0xF4 && p[1] > 0x8F) return 0;  /* > U+10FFFF */
            p += 4;
        } else {
            return 0;
        }
    }
}

static inline int scan_string(Cursor *c, const char **start, Py_ssize_t *len) {
    int escaped;
    return scan_string_esc(c, start, len, &escaped);
}

/* An integer with at most 18 digits (anything else: not certain, 0). */
static int scan_number(Cursor *c, int *is_int, long long *value) {
    const char *p = c->p;
    const char *end = c->end;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return 0;
    const char *digits = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return 0;
    }
    Py_ssize_t nd = p - digits;
    if (nd > 18) return 0;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return 0; /* floats: orjson's call */
    long long v = 0;
    for (const char *q = digits; q < p; q++) v = v * 10 + (*q - '0');
    *is_int = 1;
    *value = neg ? -v : v;
    c->p = p;
    return 1;
}

/* Kinds of values, for the fields the meter reads. */
enum { V_OTHER, V_NULL, V_STRING, V_OBJECT, V_ARRAY, V_INT };

static int scan_value(Cursor *c, int depth);

static int scan_literal(Cursor *c, const char *lit, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* Skip any value (validated). Returns its kind, or -1 if not certain. */
static int skip_value(Cursor *c, int depth) {
    if (depth > MAX_DEPTH) return -1;
    skip_ws(c);
    if (c->p >= c->end) return -1;
    char ch = *c->p;
    if (ch == '"') {
        const char *s;
        Py_ssize_t n;
        return scan_string(c, &s, &n) ? V_STRING : -1;
    }
    if (ch == '{' || ch == '[') return scan_value(c, depth) ? (ch == '{' ? V_OBJECT : V_ARRAY) : -1;
    if (ch == 'n') return scan_literal(c, "null", 4) ? V_NULL : -1;
    if (ch == 't') return scan_literal(c, "true", 4) ? V_OTHER : -1;
    if (ch == 'f') return scan_literal(c, "false", 5) ? V_OTHER : -1;
    int is_int = 0;
    long long v;
    if (ch == '-' || (ch >= '0' && ch <= '9')) return scan_number(c, &is_int, &v) ? V_INT : -1;
    return -1;
}

/* Generic object/array (c->p on '{' or '['): validated, nothing recorded. */
static int scan_value(Cursor *c, int depth) {
    char open = *c->p;
    char close = open == '{' ? '}' : ']';
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 1;
    }
    for (;;) {
        if (open == '{') {
            skip_ws(c);
            if (c->p >= c->end || *c->p != '"') return 0;
            const char *s;
            Py_ssize_t n;
            if (!scan_string(c, &s, &n)) return 0;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') return 0;
            c->p++;
        }
        if (skip_value(c, depth + 1) < 0) return 0;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == close) {
            c->p++;
            return 1;
        }
        return 0;
    }
}

static inline int key_is(const char *s, Py_ssize_t n, const char *lit, Py_ssize_t ln) {
    return n == ln && memcmp(s, lit, (size_t)n) == 0;
}

/* Iterate over an object's members: on '{'. Calls back per key with the cursor
 * on the value; the callback must consume the value. */
typedef int (*member_fn)(Cursor *c, const char *key, Py_ssize_t keylen, Event *ev, int depth,
                         unsigned *seen);

/* A key we track must not hide behind an escape ("\u0075sage"): scan_object hands
 * escaped keys over as NULL, and the members treat that as "not certain". */

static int scan_object(Cursor *c, Event *ev, int depth, member_fn fn) {
    if (depth > MAX_DEPTH) return 0;
    unsigned seen = 0;
    c->p++; /* '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') return 0;
        const char *key;
        Py_ssize_t keylen;
        int escaped;
        if (!scan_string_esc(c, &key, &keylen, &escaped)) return 0;
        if (escaped) return 0; /* an escaped key might be one we track */
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return 0;
        c->p++;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (!fn(c, key, keylen, ev, depth, &seen)) return 0;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == '}') {
            c->p++;
            return 1;
        }
        return 0;
    }
}

/* Once per object: a key seen twice (escaped or not) means "not certain". */
static inline int mark(unsigned *seen, unsigned bit) {
    if (*seen & bit) return 0;
    *seen |= bit;
    return 1;
}

/* A count member: null (1, *present unchanged) or a non-negative integer (1, *present
 * set); anything else is not certain (0: the full path raises MalformedUsage). */
static int scan_count(Cursor *c, int *present, long long *value) {
    if (*c->p == 'n') return scan_literal(c, "null", 4);
    int is_int = 0;
    long long v = 0;
    if (!(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) return 0;
    if (!scan_number(c, &is_int, &v) || v < 0) return 0;
    *present = 1;
    *value = v;
    return 1;
}

static int details_member(Cursor *c, const char *key, Py_ssize_t n, Event *ev, int depth,
                          unsigned *seen) {
    if (key_is(key, n, "reasoning_tokens", 16)) {
        if (!mark(seen, 1)) return 0;
        return scan_count(c, &ev->rt_present, &ev->rt);
    }
    return skip_value(c, depth + 1) >= 0;
}

static int usage_member(Cursor *c, const char *key, Py_ssize_t n, Event *ev, int depth,
                        unsigned *seen) {
    if (key_is(key, n, "completion_tokens", 17)) {
        if (!mark(seen, 1)) return 0;
        return scan_count(c, &ev->cum_present, &ev->cum);
    }
    if (key_is(key, n, "prompt_tokens", 13)) {
        if (!mark(seen, 2)) return 0;
        return scan_count(c, &ev->prompt_present, &ev->prompt);
    }
    if (key_is(key, n, "completion_tokens_details", 25)) {
        if (!mark(seen, 4)) return 0;
        if (*c->p == 'n') return scan_literal(c, "null", 4);
        if (*c->p != '{') return 0; /* not an object: MalformedUsage on the full path */
        return scan_object(c, ev, depth + 1, details_member);
    }
    return skip_value(c, depth + 1) >= 0;
}

/* A tool call's function: "name" and "arguments" are strings or null (anything else is
 * malformed on the full path: not certain here). */
static int function_member(Cursor *c, const char *key, Py_ssize_t n, Event *ev, int depth,
                           unsigned *seen) {
    (void)ev;
    unsigned bit = 0;
    if (key_is(key, n, "name", 4)) bit = 1;
    else if (key_is(key, n, "arguments", 9)) bit = 2;
    if (!bit) return skip_value(c, depth + 1) >= 0;
    if (!mark(seen, bit)) return 0;
    if (*c->p == 'n') return scan_literal(c, "null", 4);
    if (*c->p != '"') return 0;
    const char *s;
    Py_ssize_t len;
    return scan_string(c, &s, &len);
}

/* One of delta.tool_calls: an object whose "function" is an object or null. */
static int call_member(Cursor *c, const char *key, Py_ssize_t n, Event *ev, int depth,
                       unsigned *seen) {
    if (!key_is(key, n, "function", 8)) return skip_value(c, depth + 1) >= 0;
    if (!mark(seen, 1)) return 0;
    if (*c->p == 'n') return scan_literal(c, "null", 4);
    if (*c->p != '{') return 0;
    return scan_object(c, ev, depth + 1, function_member);
}

/* delta.tool_calls: null, or a list of calls (non-empty: a tool-call chunk). */
static int scan_tool_calls(Cursor *c, Event *ev, int depth) {
    if (*c->p == 'n') return scan_literal(c, "null", 4);
    if (*c->p != '[') return 0; /* not a list: malformed on the full path */
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 1;
    }
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end || *c->p != '{') return 0; /* a call must be an object */
        if (!scan_object(c, ev, depth + 1, call_member)) return 0;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ']') {
            c->p++;
            ev->tool_text = 1;
            return 1;
        }
        if (*c->p != ',') return 0;
        c->p++;
    }
}

static int delta_member(Cursor *c, const char *key, Py_ssize_t n, Event *ev, int depth,
                        unsigned *seen) {
    unsigned bit = 0;
    if (key_is(key, n, "content", 7)) bit = 1;
    else if (key_is(key, n, "reasoning", 9)) bit = 2;
    else if (key_is(key, n, "reasoning_content", 17)) bit = 4;
    else if (key_is(key, n, "tool_calls", 10)) {
        if (!mark(seen, 8)) return 0;
        return scan_tool_calls(c, ev, depth + 1);
    }
    if (!bit) return skip_value(c, depth + 1) >= 0;
    if (!mark(seen, bit)) return 0;
    if (*c->p == 'n') {
        if (!scan_literal(c, "null", 4)) return 0;
        return 1;
    }
    if (*c->p != '"') return 0; /* text must be a string or null */
    const char *s;
    Py_ssize_t len;
    if (!scan_string(c, &s, &len)) return 0;
    /* encode: 1 = string empty, 2 = string non-empty (0 = null/absent) */
    int v = len > 0 ? 2 : 1;
    if (bit == 1) ev->content_text = v;
    else if (bit == 2) ev->reasoning_text = v;
    else ev->reasoning_content_text = v;
    return 1;
}

static int choice_member(Cursor *c, const char *key, Py_ssize_t n, Event *ev, int depth,
                         unsigned *seen) {
    if (key_is(key, n, "delta", 5)) {
        if (!mark(seen, 1)) return 0;
        if (*c->p == 'n') return scan_literal(c, "null", 4);
        if (*c->p != '{') return 0;
        return scan_object(c, ev, depth + 1, delta_member);
    }
    if (key_is(key, n, "finish_reason", 13)) {
        if (!mark(seen, 2)) return 0;
        if (*c->p == 'n') return scan_literal(c, "null", 4);
        if (*c->p != '"') return 0;
        const char *s;
        Py_ssize_t len;
        if (!scan_string(c, &s, &len)) return 0;
        if (memchr(s, '\\', (size_t)len) != NULL) return 0; /* escaped: let orjson decode */
        ev->fr_p = s;
        ev->fr_n = len;
        return 1;
    }
    return skip_value(c, depth + 1) >= 0;
}

static int root_member(Cursor *c, const char *key, Py_ssize_t n, Event *ev, int depth,
                       unsigned *seen) {
    if (key_is(key, n, "choices", 7)) {
        if (!mark(seen, 1)) return 0;
        if (*c->p == 'n') return scan_literal(c, "null", 4);
        if (*c->p != '[') return 0;
        ev->choices_none = 0;
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            return 1;
        }
        ev->choices_truthy = 1;
        skip_ws(c);
        if (c->p >= c->end || *c->p != '{') return 0; /* choices[0] must be an object */
        if (!scan_object(c, ev, depth + 1, choice_member)) return 0;
        for (;;) {
            skip_ws(c);
            if (c->p >= c->end) return 0;
            if (*c->p == ']') {
                c->p++;
                return 1;
            }
            if (*c->p != ',') return 0;
            c->p++;
            if (skip_value(c, depth + 1) < 0) return 0;
        }
    }
    /* Per-request metrics (vLLM's metrics.speculative_decoding, on the last chunk): the
     * full path keeps them. */
    if (key_is(key, n, "metrics", 7)) return 0;
    /* A server's error event ({"error": ...}, or "object": "error"): the full path says
     * server_error with its message. */
    if (key_is(key, n, "error", 5)) return 0;
    if (key_is(key, n, "object", 6) && *c->p == '"') {
        const char *s;
        Py_ssize_t len;
        if (!scan_string(c, &s, &len)) return 0;
        if (memchr(s, '\\', (size_t)len) != NULL || key_is(s, len, "error", 5)) return 0;
        return 1;
    }
    if (key_is(key, n, "usage", 5)) {
        if (!mark(seen, 2)) return 0;
        if (*c->p == 'n') return scan_literal(c, "null", 4);
        if (*c->p != '{') return 0;
        ev->usage_none = 0;
        const char *start = c->p;
        Cursor probe = *c;
        probe.p++;
        skip_ws(&probe);
        ev->usage_truthy = !(probe.p < probe.end && *probe.p == '}');
        if (!scan_object(c, ev, depth + 1, usage_member)) return 0;
        ev->usage_p = start;
        ev->usage_n = c->p - start;
        return 1;
    }
    return skip_value(c, depth + 1) >= 0;
}

/* One event payload. Returns 1 if certain (ev filled), 0 if not. */
static int scan_event(const char *p, Py_ssize_t n, Event *ev) {
    memset(ev, 0, sizeof *ev);
    ev->choices_none = 1;
    ev->usage_none = 1;
    if (n == 6 && memcmp(p, "[DONE]", 6) == 0) {
        ev->done = 1;
        return 1;
    }
    Cursor c = {p, p + n};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return 0; /* must be an object */
    if (!scan_object(&c, ev, 0, root_member)) return 0;
    skip_ws(&c);
    if (c.p != c.end) return 0;
    /* reasoning = delta.reasoning if not None else delta.reasoning_content */
    if (ev->reasoning_text == 0) ev->reasoning_text = ev->reasoning_content_text;
    ev->reasoning_text = ev->reasoning_text == 2;
    ev->content_text = ev->content_text == 2;
    if (ev->choices_none && ev->usage_none) return 0; /* malformed: the full path says so */
    /* several channels in one chunk: the full path splits them */
    if (ev->reasoning_text + ev->content_text + ev->tool_text > 1) return 0;
    return 1;
}

/* ------------------------------------------------------------- framing -- */

/* Scan one read: chunk framing, SSE events. Fills evs; returns the number of
 * events, or -1 if not certain. *ended: the zero-size chunk was read. */
static int scan_read(const char *buf, Py_ssize_t n, Event *evs, int *ended) {
    Py_ssize_t pos = 0;
    int nev = 0;
    *ended = 0;
    while (pos < n) {
        /* chunk size: 1-8 hex digits, CRLF */
        Py_ssize_t start = pos;
        long size = 0;
        while (pos < n && pos - start < 9) {
            int h = hexval(buf[pos]);
            if (h < 0) break;
            size = size * 16 + h;
            pos++;
        }
        Py_ssize_t nd = pos - start;
        if (nd == 0 || nd > 8) return -1;
        if (pos + 2 > n || buf[pos] != '\r' || buf[pos + 1] != '\n') return -1;
        pos += 2;
        if (size == 0) {
            /* the last chunk: no trailers, and nothing after it (else the full path) */
            if (pos + 2 != n || buf[pos] != '\r' || buf[pos + 1] != '\n') return -1;
            *ended = 1;
            return nev;
        }
        if (pos + size + 2 > n) return -1; /* a chunk split across reads */
        const char *chunk = buf + pos;
        const char *cend = chunk + size;
        if (cend[0] != '\r' || cend[1] != '\n') return -1;
        /* the chunk: one or more "data: <line>\n\n" events, nothing else */
        const char *q = chunk;
        while (q < cend) {
            if (cend - q < 8 || memcmp(q, "data: ", 6) != 0) return -1;
            const char *line = q + 6;
            const char *nl = memchr(line, '\n', (size_t)(cend - line));
            if (nl == NULL || nl + 1 >= cend || nl[1] != '\n') return -1;
            if (memchr(line, '\r', (size_t)(nl - line)) != NULL) return -1;
            if (nev >= MAX_EVENTS) return -1;
            if (!scan_event(line, nl - line, &evs[nev])) return -1;
            nev++;
            q = nl + 2;
        }
        pos += size + 2;
    }
    return nev;
}

/* ---------------------------------------------------------- accounting -- */

static inline void set_obj(PyObject **slot, PyObject *value) {
    PyObject *old = *slot;
    Py_INCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

static inline int is_none(PyObject *o) { return o == NULL || o == Py_None; }

/* Account data[:n] read at now_obj (a float). Returns 0 declined, 1 consumed,
 * 2 consumed and the body ended, 3 consumed and the stream ended at [DONE] (its
 * body did not), -1 on error (exception set). */
static int meter_feed(MeterCore *self, const char *data, Py_ssize_t n, PyObject *now_obj) {
    if (self->want_text || self->sse_pending || n <= 0) return 0;
    if (!PyList_CheckExact(self->_gaps) || !PyList_CheckExact(self->_chunk_tokens) ||
        !PyFloat_CheckExact(now_obj))
        return 0;
    Event evs[MAX_EVENTS];
    int ended = 0;
    int nev = scan_read(data, n, evs, &ended);
    if (nev < 0 || (nev == 0 && !ended)) return 0;
    /* Usage the meter would refuse: decline the whole read (nothing changed yet), and
     * the full path raises at that chunk, after accounting the ones before it. */
    long long prev_cum = self->_prev_cum;
    for (int i = 0; i < nev; i++) {
        Event *ev = &evs[i];
        if (!ev->usage_truthy) continue;
        if (ev->cum_present) {
            if (ev->cum < prev_cum || ev->cum > self->token_limit) return 0;
            prev_cum = ev->cum;
        }
        if (ev->prompt_present && ev->prompt > MAX_PROMPT_TOKENS) return 0;
        if (ev->rt_present && ev->rt > (ev->cum_present ? ev->cum : self->token_limit)) return 0;
    }
    double now = PyFloat_AS_DOUBLE(now_obj);
    int rc = ended ? 2 : 1;
    for (int i = 0; i < nev; i++) {
        Event *ev = &evs[i];
        set_obj(&self->last_event_t, now_obj);
        if (ev->done) {
            self->done = 1;
            if (!ended) rc = 3;
            break; /* a stream ends at [DONE]: what follows is not accounted */
        }
        if (ev->fr_p != NULL) {
            PyObject *fr = PyUnicode_DecodeUTF8(ev->fr_p, ev->fr_n, "strict");
            if (fr == NULL) return -1;
            Py_XSETREF(self->finish_reason, fr);
        }
        long long ntok = -1;
        if (ev->usage_truthy) {
            PyObject *raw = PyBytes_FromStringAndSize(ev->usage_p, ev->usage_n);
            if (raw == NULL) return -1;
            Py_XSETREF(self->_usage, raw);
            if (ev->cum_present) {
                ntok = ev->cum - self->_prev_cum;
                self->_prev_cum = ev->cum;
            }
        }
        if (!ev->reasoning_text && !ev->content_text && !ev->tool_text) {
            if (ntok > 0 && self->continuous) {
                if (is_none(self->first_t)) {
                    self->_pending_tokens += ntok;
                } else {
                    self->tokens_textless += ntok;
                    if (self->last_channel == 1) self->tokens_content_exact += ntok;
                    else if (self->last_channel == 2) self->tokens_tool_exact += ntok;
                    else self->tokens_reasoning_exact += ntok;
                }
            }
            continue;
        }
        if (ntok < 0) {
            self->continuous = 0;
        } else if (self->_pending_tokens) {
            ntok += self->_pending_tokens;
            self->_pending_tokens = 0;
        }
        int channel;
        if (ev->content_text) {
            channel = 1;
            self->chunks_content += 1;
            self->has_content_text = 1;
            if (is_none(self->first_content_t)) set_obj(&self->first_content_t, now_obj);
        } else if (ev->tool_text) {
            channel = 2;
            self->chunks_tool += 1;
        } else {
            channel = 0;
            self->chunks_reasoning += 1;
        }
        self->last_channel = channel;
        if (ntok >= 0) {
            if (channel == 1) self->tokens_content_exact += ntok;
            else if (channel == 2) self->tokens_tool_exact += ntok;
            else self->tokens_reasoning_exact += ntok;
        }
        if (is_none(self->first_t)) {
            set_obj(&self->first_t, now_obj);
        } else {
            PyObject *gap = PyFloat_FromDouble(now - self->_last_t);
            if (gap == NULL) return -1;
            int err = PyList_Append(self->_gaps, gap);
            Py_DECREF(gap);
            if (err < 0) return -1;
            PyObject *tok = PyLong_FromLongLong(ntok);
            if (tok == NULL) return -1;
            err = PyList_Append(self->_chunk_tokens, tok);
            Py_DECREF(tok);
            if (err < 0) return -1;
        }
        self->_last_t = now;
    }
    return rc;
}

static PyObject *MeterCore_feed_read(MeterCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "feed_read(buf, n, now)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n < 0) {
        if (PyErr_Occurred()) return NULL;
        return PyLong_FromLong(0);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (n > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "n is larger than the buffer");
        return NULL;
    }
    int rc = meter_feed(self, (const char *)view.buf, n, args[2]);
    PyBuffer_Release(&view);
    if (rc < 0) return NULL;
    return PyLong_FromLong(rc);
}

static PyMethodDef MeterCore_methods[] = {
    {"feed_read", (PyCFunction)(void (*)(void))MeterCore_feed_read, METH_FASTCALL,
     "feed_read(buf, n, now) -> int: account the first n bytes of buf, one socket read of a "
     "chunked SSE body, if certain (1; 2 when the body ended; 3 when the stream ended at "
     "[DONE] before its body); else 0 and nothing changed."},
    {NULL, NULL, 0, NULL},
};

#define SCALAR_MEMBER(ctype, member_type, name) \
    {#name, member_type, offsetof(MeterCore, name), 0, NULL},
#define OBJECT_MEMBER(name) {#name, T_OBJECT, offsetof(MeterCore, name), 0, NULL},
static PyMemberDef MeterCore_members[] = {
    METER_SCALARS(SCALAR_MEMBER)
    METER_OBJECTS(OBJECT_MEMBER)
    {NULL, 0, 0, 0, NULL},
};
#undef SCALAR_MEMBER
#undef OBJECT_MEMBER

#define VISIT_FIELD(name) Py_VISIT(self->name);
static int MeterCore_traverse(MeterCore *self, visitproc visit, void *arg) {
    METER_OBJECTS(VISIT_FIELD)
    return 0;
}
#undef VISIT_FIELD

#define CLEAR_FIELD(name) Py_CLEAR(self->name);
static int MeterCore_clear(MeterCore *self) {
    METER_OBJECTS(CLEAR_FIELD)
    return 0;
}
#undef CLEAR_FIELD

static void MeterCore_dealloc(MeterCore *self) {
    PyObject_GC_UnTrack(self);
    MeterCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject MeterCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "specload.load._fastpath.MeterCore",
    .tp_basicsize = sizeof(MeterCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "State of one streamed response, with the C fast path feed_read().",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)MeterCore_traverse,
    .tp_clear = (inquiry)MeterCore_clear,
    .tp_dealloc = (destructor)MeterCore_dealloc,
    .tp_methods = MeterCore_methods,
    .tp_members = MeterCore_members,
};

/* ------------------------------------------------- stamped socket reads -- */

/* Receive timestamps: the kernel stamps each packet as it arrives (SO_TIMESTAMPNS,
 * CLOCK_REALTIME); recv_stamped() returns it on time.perf_counter()'s clock
 * (CLOCK_MONOTONIC), so a read done late still carries the arrival time. */

static PyObject *enable_rx_timestamps(PyObject *mod, PyObject *arg) {
    (void)mod;
    int fd = (int)PyLong_AsLong(arg);
    if (fd < 0 && PyErr_Occurred()) return NULL;
#ifdef SO_TIMESTAMPNS
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) == 0) Py_RETURN_TRUE;
#endif
    Py_RETURN_FALSE;
}

static inline double ts_s(const struct timespec *t) {
    return (double)t->tv_sec + (double)t->tv_nsec * 1e-9;
}

static inline double mono_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ts_s(&t);
}

/* recvmsg into buf; *t: the arrival time on CLOCK_MONOTONIC (time.perf_counter's
 * clock) from the kernel's receive stamp, *stamped = 0 without a plausible one.
 * Returns recvmsg's result (-1: errno). */
static ssize_t recv_raw(int fd, char *buf, size_t size, double *t, int *stamped) {
    struct iovec iov = {buf, size};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec)) * 2];
        struct cmsghdr align;
    } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
    *stamped = 0;
    if (n <= 0) return n;
#ifdef SO_TIMESTAMPNS
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS &&
            c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec arrived, real_now, mono;
            memcpy(&arrived, CMSG_DATA(c), sizeof arrived);
            clock_gettime(CLOCK_REALTIME, &real_now);
            clock_gettime(CLOCK_MONOTONIC, &mono);
            double age = ts_s(&real_now) - ts_s(&arrived);
            /* Plausible: in the last 10 s (a wall-clock step makes it implausible).
             * Data that came after the poll (read together with what the poll saw)
             * is stamped later than the poll. */
            if (age >= 0.0 && age < 10.0) {
                *t = ts_s(&mono) - age;
                *stamped = 1;
            }
            break;
        }
    }
#endif
    return n;
}

static PyObject *recv_stamped(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "recv_stamped(fd, buf, now)");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    if (fd < 0 && PyErr_Occurred()) return NULL;
    double now = PyFloat_AsDouble(args[2]);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) return NULL;
    double t = now;
    int stamped = 0;
    ssize_t n = recv_raw(fd, (char *)view.buf, (size_t)view.len, &t, &stamped);
    PyBuffer_Release(&view);
    if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (!stamped) return Py_BuildValue("(nO)", (Py_ssize_t)n, Py_None);
    return Py_BuildValue("(nd)", (Py_ssize_t)n, t);
}

/* --------------------------------------------------------- reactor round -- */

enum {
    R_DATA = 0,
    R_EOF = 1,
    R_ENDED = 2,
    R_ERRNO = 3,
    R_LOOP = 4,
    R_UNKNOWN = 5,
    R_EXC = 6,
    R_STOPPED = 7
};

static PyObject *str_fast; /* "fast" */

static int add_left(PyObject *left, int fd, int kind, PyObject *payload, double t) {
    PyObject *item = Py_BuildValue("(iiOd)", fd, kind, payload, t);
    if (item == NULL) return -1;
    int err = PyList_Append(left, item);
    Py_DECREF(item);
    return err;
}

/* read_ready(epfd, timeout_s, buf, parsers, loop_fd) -> (ready, leftovers, now, unstamped)
 *
 * One reactor round: epoll_wait (GIL released), then for each ready fd a stamped
 * read into buf, accounted by parsers[fd].fast (a MeterCore) when it takes it.
 * Everything else goes back to Python as (fd, kind, payload, t): R_DATA (payload:
 * the bytes read), R_EOF, R_ENDED (the fused reader read the end of the body),
 * R_ERRNO (payload: errno), R_LOOP (loop_fd was ready), R_UNKNOWN (no parser for
 * fd), R_EXC (payload: the exception the fused reader raised), R_STOPPED (the
 * stream ended at [DONE] before its body: the request is complete). ``now``: when
 * epoll_wait returned (CLOCK_MONOTONIC); reads without a kernel stamp use it. */
static PyObject *read_ready(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "read_ready(epfd, timeout_s, buf, parsers, loop_fd)");
        return NULL;
    }
    int epfd = (int)PyLong_AsLong(args[0]);
    double timeout_s = PyFloat_AsDouble(args[1]);
    int loop_fd = (int)PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    PyObject *parsers = args[3];
    if (!PyList_Check(parsers)) {
        PyErr_SetString(PyExc_TypeError, "parsers must be a list");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_WRITABLE) < 0) return NULL;
    struct epoll_event evs[512];
    int timeout_ms = timeout_s <= 0 ? 0 : (int)(timeout_s * 1000.0 + 0.999);
    int nready;
    Py_BEGIN_ALLOW_THREADS
    nready = epoll_wait(epfd, evs, 512, timeout_ms);
    Py_END_ALLOW_THREADS
    double now = mono_now();
    if (nready < 0) {
        int err = errno;
        PyBuffer_Release(&view);
        if (err == EINTR) {
            if (PyErr_CheckSignals() < 0) return NULL;
            return Py_BuildValue("(i[]di)", 0, now, 0);
        }
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *left = PyList_New(0);
    if (left == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *now_obj = PyFloat_FromDouble(now);
    if (now_obj == NULL) goto error;
    int unstamped = 0;
    for (int i = 0; i < nready; i++) {
        int fd = evs[i].data.fd;
        if (fd == loop_fd) {
            if (add_left(left, fd, R_LOOP, Py_None, now) < 0) goto error;
            continue;
        }
        PyObject *parser = fd >= 0 && fd < PyList_GET_SIZE(parsers) ? PyList_GET_ITEM(parsers, fd)
                                                                    : Py_None;
        if (parser == Py_None) {
            if (add_left(left, fd, R_UNKNOWN, Py_None, now) < 0) goto error;
            continue;
        }
        Py_INCREF(parser);
        double t = now;
        int stamped = 0;
        ssize_t n = recv_raw(fd, (char *)view.buf, (size_t)view.len, &t, &stamped);
        if (n < 0) {
            int e = errno;
            Py_DECREF(parser);
            if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) continue;
            PyObject *err = PyLong_FromLong(e);
            if (err == NULL) goto error;
            int rc = add_left(left, fd, R_ERRNO, err, now);
            Py_DECREF(err);
            if (rc < 0) goto error;
            continue;
        }
        if (n == 0) {
            Py_DECREF(parser);
            if (add_left(left, fd, R_EOF, Py_None, now) < 0) goto error;
            continue;
        }
        if (!stamped) unstamped++;
        PyObject *fast = PyObject_GetAttr(parser, str_fast);
        Py_DECREF(parser);
        if (fast == NULL) goto error;
        int rc = 0;
        if (PyObject_TypeCheck(fast, &MeterCoreType)) {
            PyObject *t_obj = stamped ? PyFloat_FromDouble(t) : (Py_INCREF(now_obj), now_obj);
            if (t_obj == NULL) {
                Py_DECREF(fast);
                goto error;
            }
            rc = meter_feed((MeterCore *)fast, (const char *)view.buf, n, t_obj);
            Py_DECREF(t_obj);
        }
        Py_DECREF(fast);
        if (rc < 0) {
            /* the fused reader failed: its exception goes to Python, for this stream */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            int err = add_left(left, fd, R_EXC, value ? value : Py_None, t);
            Py_XDECREF(value);
            if (err < 0) goto error;
            continue;
        }
        if (rc == 0) {
            PyObject *data = PyBytes_FromStringAndSize((const char *)view.buf, n);
            if (data == NULL) goto error;
            int err = add_left(left, fd, R_DATA, data, t);
            Py_DECREF(data);
            if (err < 0) goto error;
            continue;
        }
        if (rc == 2 && add_left(left, fd, R_ENDED, Py_None, t) < 0) goto error;
        if (rc == 3 && add_left(left, fd, R_STOPPED, Py_None, t) < 0) goto error;
    }
    PyBuffer_Release(&view);
    PyObject *res = Py_BuildValue("(iNOi)", nready, left, now_obj, unstamped);
    Py_DECREF(now_obj);
    return res;
error:
    PyBuffer_Release(&view);
    Py_XDECREF(now_obj);
    Py_DECREF(left);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"read_ready", (PyCFunction)(void (*)(void))read_ready, METH_FASTCALL,
     "read_ready(epfd, timeout_s, buf, parsers, loop_fd) -> (ready, leftovers, now, "
     "unstamped): one reactor round (see the C source)."},
    {"enable_rx_timestamps", (PyCFunction)enable_rx_timestamps, METH_O,
     "enable_rx_timestamps(fd) -> bool: ask the kernel to stamp received packets."},
    {"recv_stamped", (PyCFunction)(void (*)(void))recv_stamped, METH_FASTCALL,
     "recv_stamped(fd, buf, now) -> (n, t): read into buf without blocking; t is the "
     "arrival time of the (last packet of the) data on time.perf_counter()'s clock, "
     "or None without a plausible kernel timestamp. Errors raise OSError "
     "(BlockingIOError...)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "specload.load._fastpath",
    .m_doc = "C fast path of the load generator's per-read parsing and accounting.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    init_tables();
    str_fast = PyUnicode_InternFromString("fast");
    if (str_fast == NULL) return NULL;
    if (PyType_Ready(&MeterCoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL) return NULL;
    Py_INCREF(&MeterCoreType);
    if (PyModule_AddObject(m, "MeterCore", (PyObject *)&MeterCoreType) < 0) {
        Py_DECREF(&MeterCoreType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_PROMPT_TOKENS", (long)MAX_PROMPT_TOKENS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
