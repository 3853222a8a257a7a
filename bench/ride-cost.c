/*
 * ride-cost: what the access log's write costs a loop turn, as write(2) after the
 * turn's send, and as a second entry in the io_uring submission that carries the send
 * (proxy/lk_io.c's ring_round, lk_uring_write): a 150-byte answer to a socket pair and a
 * 200-byte line to /dev/null (bench/run's lookout-shipped) and to a pipe, one turn at a
 * time on one core.  Per turn, medians over 5 runs of 200,000 turns of each of:
 *   writev + write(2)             a turn with a line, before the ride
 *   ring: send + write            the same turn riding (RWF_NOWAIT, inside io_uring_enter)
 * and of the same turns without the line (writev; a ring of one send), so that
 *   saved = the first less the second; write(2) alone and the ride alone = each with its
 *   line less without it.
 *
 *   cc -O2 bench/ride-cost.c -o /tmp/ride-cost -luring
 *   taskset -c 0 /tmp/ride-cost
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <liburing.h>

#define TURNS 200000
#define RUNS 5

static char answer[150], line[200], sink[1 << 16];
static int sv[2], devnull, pp[2];
static struct io_uring ring;

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* What the peers received so far, read away every 64 turns. */
static void
drain(int i)
{
    if ((i & 63) != 63)
        return;
    while (recv(sv[1], sink, sizeof(sink), MSG_DONTWAIT) > 0)
        ;
    while (read(pp[0], sink, sizeof(sink)) > 0)
        ;
}

static void
reap(int n)
{
    struct io_uring_cqe *c;

    for (int k = 0; k < n; k++) {
        if (io_uring_peek_cqe(&ring, &c) != 0 || c->res < 0) {
            fprintf(stderr, "ride-cost: an entry did not complete within its submission\n");
            exit(1);
        }
        io_uring_cqe_seen(&ring, c);
    }
}

static void
turn_writev(int i, int to)
{
    struct iovec v = {answer, sizeof(answer)};

    if (writev(sv[0], &v, 1) < 0 || (to >= 0 && write(to, line, sizeof(line)) < 0)) {
        perror("ride-cost");
        exit(1);
    }
    drain(i);
}

static void
turn_ring(int i, int to)
{
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);

    io_uring_prep_send(s, sv[0], answer, sizeof(answer), MSG_DONTWAIT);
    if (to >= 0) {
        s = io_uring_get_sqe(&ring);
        io_uring_prep_write(s, to, line, sizeof(line), (uint64_t)-1);
        s->rw_flags = RWF_NOWAIT;
    }
    io_uring_submit(&ring);
    reap(to >= 0 ? 2 : 1);
    drain(i);
}

static int
cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double
median(double *v)
{
    qsort(v, RUNS, sizeof(v[0]), cmp);
    return v[RUNS / 2];
}

/* Microseconds per turn over TURNS turns. */
static double
per_turn(void (*turn)(int, int), int to)
{
    double t0 = now();

    for (int i = 0; i < TURNS; i++)
        turn(i, to);
    return (now() - t0) / TURNS * 1e6;
}

int
main(void)
{
    memset(answer, 'a', sizeof(answer));
    memset(line, 'l', sizeof(line) - 1);
    line[sizeof(line) - 1] = '\n';
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || pipe(pp) != 0 ||
        (devnull = open("/dev/null", O_WRONLY)) < 0 ||
        io_uring_queue_init(8, &ring, IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN) != 0) {
        perror("ride-cost: set-up");
        return 1;
    }
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    fcntl(pp[0], F_SETFL, O_NONBLOCK);
    struct {
        const char *to;
        int fd;
    } tos[] = {{"/dev/null", devnull}, {"a pipe", pp[1]}};
    printf("| the line to | writev + write(2) | ring: send + write | saved | write(2) alone | "
           "the ride alone |\n|---|---:|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < sizeof(tos) / sizeof(tos[0]); k++) {
        double before[RUNS], after[RUNS], saved[RUNS], wcost[RUNS], rcost[RUNS];
        /* the four in turn in each run, so that a drift of the machine meets them alike */
        for (int r = 0; r < RUNS; r++) {
            double w = per_turn(turn_writev, tos[k].fd), a = per_turn(turn_writev, -1);
            double rr = per_turn(turn_ring, tos[k].fd), ra = per_turn(turn_ring, -1);
            before[r] = w, after[r] = rr, saved[r] = w - rr, wcost[r] = w - a, rcost[r] = rr - ra;
        }
        printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", tos[k].to, median(before),
               median(after), median(saved), median(wcost), median(rcost));
    }
    printf("\nMicroseconds per turn, medians over %d runs of %d turns each; a run times the four "
           "turns (with and without the line, each way) one after another, and the differences "
           "are taken within a run.\n",
           RUNS, TURNS);
    return 0;
}
