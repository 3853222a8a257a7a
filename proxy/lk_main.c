/*
 * lookout: argv, config, run loop.  Nothing else lives here.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "config.h"
#include "lk_access.h"
#include "lk_admin.h"
#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_health.h"
#include "lk_live.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_probe.h"
#include "lk_protos.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_workers.h"

static void
usage(FILE *out)
{
    fprintf(out,
            "Usage: lookout -c FILE            run in the foreground, logging to stderr\n"
            "       lookout --check -c FILE    validate FILE, print the resolved listener map\n"
            "       lookout --check --live -c FILE\n"
            "                                  the same with the brokers registered in ZooKeeper\n"
            "       lookout --probe -c FILE    compare the map with what the brokers advertise\n"
            "       lookout --keys             list every configuration key\n"
            "       lookout --version | --help\n"
            "\n"
            "lookout is an edge proxy for Apache Pulsar and Apache Kafka clusters: it\n"
            "rewrites every broker address it forwards into the listener clients can reach.\n"
            "\n"
            "  -c, --config FILE   configuration file (see conf/lookout.conf)\n"
            "  -t, --check         check the configuration and exit: 0 if valid, 1 if not\n"
            "  -l, --live          with --check: also read each cluster's ZooKeeper and print\n"
            "                      the map as it stands there, each broker marked static or\n"
            "                      live; 1 if a store cannot be read within its session\n"
            "                      timeout (10s by default)\n"
            "  -p, --probe         ask every broker what it advertises and print where the\n"
            "                      map disagrees: exit 0 if it agrees, 1 if not, 2 if FILE\n"
            "                      is not a valid configuration\n"
            "  -k, --keys          print every configuration key, one a line: its section,\n"
            "                      name, default and what it does, separated by tabs\n"
            "  -V, --version       print the version and exit\n"
            "  -h, --help          print this help and exit\n"
            "\n"
            "Signals: SIGHUP reloads FILE and its certificates (a bad one is refused and\n"
            "the running config kept); SIGTERM stops accepting, lets exchanges under way\n"
            "finish for up to drain_timeout, and exits 0; SIGINT does the same within 1s.\n");
}

static struct event *sigs[4];
static const char *conf_file;
static struct lk_conf *first_conf; /* for what a reload cannot change */
static unsigned drain_timeout_ms;  /* the current generation's */
static struct lk_runtime *checked_rt; /* whose active health checks run (lk_health.h) */

/* SIGINT: a drain, but short (someone at a terminal wants it gone). */
#define LK_SIGINT_DRAIN_MS 1000

/* SIGUSR1: the access log file was moved away (logrotate); a new one. */
static void
on_usr1(evutil_socket_t sig, short what, void *arg)
{
    char err[512];

    if (lk_access_reopen(err, sizeof(err)) != 0)
        lk_log(LK_ERR, NULL, "SIGUSR1: %s; the access log goes to the old file still", err);
    else
        lk_log(LK_INFO, NULL, "SIGUSR1: access log reopened");
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
    unsigned ms = drain_timeout_ms;

    if (sig == SIGINT && ms > LK_SIGINT_DRAIN_MS)
        ms = LK_SIGINT_DRAIN_MS;
    lk_log(LK_INFO, NULL, "%s: stopping; exchanges under way may take up to %u ms",
           sig == SIGINT ? "SIGINT" : "SIGTERM", ms);
    lk_workers_drain(ms);
}

/* A new generation in service, for a reload or a change of a store's
 * brokers (lk_live.h): a runtime swapped in for new connections and
 * exchanges (lk_workers_reload), and the health checks moved to it. */
static int
swap_in(struct lk_conf *conf, struct lk_reload_stats *st, char *err, size_t errlen)
{
    struct lk_runtime *rt = lk_runtime_new(conf, err, errlen);

    if (rt == NULL || lk_workers_reload(rt, st, err, errlen) != 0) {
        lk_runtime_free(rt);
        return -1;
    }
    /* The checks follow the generation: the new one's brokers and keys. */
    lk_health_stop(checked_rt);
    checked_rt = rt;
    if (lk_health_start(rt, lk_workers_main_base(), err, errlen) != 0)
        lk_log(LK_ERR, NULL, "generation %llu: %s: brokers are not checked",
               (unsigned long long)rt->generation, err);
    return 0;
}

/* The same for lk_live, which needs no counts. */
static int
install(struct lk_conf *conf, char *err, size_t errlen)
{
    struct lk_reload_stats st;

    return swap_in(conf, &st, err, errlen);
}

/* SIGHUP: the config file again, checked as at start (with the stores'
 * brokers as last read), then installed. */
static void
on_reload(evutil_socket_t sig, short what, void *arg)
{
    char err[1024];
    struct lk_reload_stats st;
    size_t len;
    char *text = lk_conf_read(conf_file, &len, err, sizeof(err));
    struct lk_conf *conf = text != NULL ? lk_live_build(conf_file, text, len, err, sizeof(err))
                                        : NULL;

    if (conf == NULL || swap_in(conf, &st, err, sizeof(err)) != 0) {
        lk_conf_unref(conf);
        free(text);
        lk_reloads_failed++;
        lk_log(LK_ERR, NULL, "SIGHUP: reload refused: %s; still serving generation %llu", err,
               (unsigned long long)lk_workers_generation());
        return;
    }
    lk_reloads_ok++;
    lk_conf_warnings_log(conf);
    lk_live_follow(lk_workers_main_base(), conf, conf_file, text, len, install);
    free(text);
    lk_log_level = conf->log_level;
    drain_timeout_ms = conf->drain_timeout_ms;
    if (conf->workers != first_conf->workers)
        lk_log(LK_WARN, NULL, "SIGHUP: workers = %d needs a restart; still %d", conf->workers,
               first_conf->workers);
    if (conf->io_uring != first_conf->io_uring)
        lk_log(LK_WARN, NULL, "SIGHUP: io_uring = %s needs a restart; still %s",
               conf->io_uring ? "on" : "off", first_conf->io_uring ? "on" : "off");
    if ((conf->admin == NULL) != (first_conf->admin == NULL) ||
        (conf->admin != NULL && strcmp(conf->admin, first_conf->admin) != 0))
        lk_log(LK_WARN, NULL, "SIGHUP: admin = %s needs a restart; still %s",
               conf->admin != NULL ? conf->admin : "(none)",
               first_conf->admin != NULL ? first_conf->admin : "(none)");
    if (lk_access_configure(conf, err, sizeof(err)) != 0)
        lk_log(LK_ERR, NULL, "SIGHUP: %s; the access log goes where it went", err);
    lk_log(LK_INFO, NULL,
           "SIGHUP: reloaded %s, generation %llu (%zu listeners kept, %zu added, "
           "%zu removed)",
           conf_file, (unsigned long long)lk_workers_generation(), st.kept, st.added, st.removed);
    lk_conf_unref(conf); /* rt holds it */
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"check", no_argument, NULL, 't'},
        {"live", no_argument, NULL, 'l'},         {"probe", no_argument, NULL, 'p'},
        {"keys", no_argument, NULL, 'k'},         {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *file = NULL;
    int check = 0, live = 0, probe = 0, ch;
    char err[1024];

    lk_pool_libevent();
    while ((ch = getopt_long(argc, argv, "c:tlpkVh", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': file = optarg; break;
        case 't': check = 1; break;
        case 'l': live = 1; break;
        case 'p': probe = 1; break;
        case 'k': lk_conf_keys_print_all(stdout); return 0;
        case 'V': printf("lookout %s\n", PACKAGE_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "lookout: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (file == NULL) {
        fprintf(stderr, "lookout: no configuration file: use -c FILE\n");
        usage(stderr);
        return 1;
    }
    if (live && !check) {
        fprintf(stderr, "lookout: --live goes with --check\n");
        usage(stderr);
        return 1;
    }
    size_t text_len;
    char *text = lk_conf_read(file, &text_len, err, sizeof(err));
    struct lk_conf *conf =
        text != NULL ? lk_conf_load_buf(file, text, text_len, err, sizeof(err)) : NULL;
    if (conf == NULL) {
        fprintf(stderr, "lookout: %s\n", err);
        free(text);
        return probe ? 2 : 1;
    }
    lk_log_level = conf->log_level;
    lk_conf_warnings_log(conf);
    struct lk_runtime *rt = lk_runtime_new(conf, err, sizeof(err));
    if (rt == NULL) {
        fprintf(stderr, "lookout: %s\n", err);
        lk_conf_unref(conf);
        return probe ? 2 : 1;
    }
    if (check) {
        int rc = 0;
        if (live)
            rc = lk_live_check(conf, file, text, text_len, stdout);
        else
            lk_conf_dump(conf, stdout);
        if (rc == 0)
            printf("configuration %s is valid\n", file);
        free(text);
        lk_runtime_free(rt);
        lk_conf_unref(conf);
        lk_stats_free();
        return rc;
    }
    if (probe) {
        free(text);
        signal(SIGPIPE, SIG_IGN);
        int rc = lk_probe_run(rt, stdout);
        lk_runtime_free(rt);
        lk_conf_unref(conf);
        lk_stats_free();
        return rc;
    }
    signal(SIGPIPE, SIG_IGN);
    if (lk_access_configure(conf, err, sizeof(err)) != 0 ||
        lk_workers_start(rt, conf->workers, lk_proto_for, err, sizeof(err)) != 0 ||
        lk_admin_start(lk_workers_main_base(), conf, err, sizeof(err)) != 0 ||
        lk_health_start(rt, lk_workers_main_base(), err, sizeof(err)) != 0) {
        fprintf(stderr, "lookout: %s\n", err);
        free(text);
        lk_admin_stop();
        lk_workers_free();
        lk_runtime_free(rt);
        lk_conf_unref(conf);
        lk_access_close();
        lk_stats_free();
        return 1;
    }
    checked_rt = rt;
    conf_file = file;
    lk_live_follow(lk_workers_main_base(), conf, file, text, text_len, install);
    free(text);
    first_conf = conf;
    drain_timeout_ms = conf->drain_timeout_ms;
    sigs[0] = evsignal_new(lk_workers_main_base(), SIGTERM, on_signal, NULL);
    sigs[1] = evsignal_new(lk_workers_main_base(), SIGINT, on_signal, NULL);
    sigs[2] = evsignal_new(lk_workers_main_base(), SIGHUP, on_reload, NULL);
    sigs[3] = evsignal_new(lk_workers_main_base(), SIGUSR1, on_usr1, NULL);
    for (size_t i = 0; i < 4; i++)
        event_add(sigs[i], NULL);
    lk_log(LK_INFO, NULL, "lookout %s started with %d worker%s", PACKAGE_VERSION, conf->workers,
           conf->workers == 1 ? "" : "s");
    lk_workers_run();
    lk_live_stop();
    lk_health_stop(checked_rt);
    for (size_t i = 0; i < 4; i++)
        event_free(sigs[i]);
    lk_admin_stop();
    lk_workers_free();
    lk_runtime_unref(rt);
    lk_conf_unref(conf);
    lk_access_close();
    lk_stats_free();
    lk_log(LK_INFO, NULL, "stopped");
    return 0;
}
