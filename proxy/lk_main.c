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
#include "lk_conn.h"
#include "lk_health.h"
#include "lk_log.h"
#include "lk_probe.h"
#include "lk_stats.h"

static void
usage(FILE *out)
{
    fprintf(out,
            "Usage: lookout -c FILE            run in the foreground, logging to stderr\n"
            "       lookout --check -c FILE    validate FILE, print the resolved listener map\n"
            "       lookout --probe -c FILE    compare the map with what the brokers advertise\n"
            "       lookout --version | --help\n"
            "\n"
            "lookout is an edge proxy for Apache Pulsar and Apache Kafka clusters: it\n"
            "rewrites every broker address it forwards into the listener clients can reach.\n"
            "\n"
            "  -c, --config FILE   configuration file (see conf/lookout.conf)\n"
            "  -t, --check         check the configuration and exit: 0 if valid, 1 if not\n"
            "  -p, --probe         ask every broker what it advertises and print where the\n"
            "                      map disagrees: exit 0 if it agrees, 1 if not, 2 if FILE\n"
            "                      is not a valid configuration\n"
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

/* SIGHUP: the config file again, checked as at start, then swapped in for
 * new connections and exchanges (lk_workers_reload). */
static void
on_reload(evutil_socket_t sig, short what, void *arg)
{
    char err[1024];
    struct lk_runtime *rt = NULL;
    struct lk_reload_stats st;
    struct lk_conf *conf = lk_conf_load(conf_file, err, sizeof(err));

    if (conf != NULL)
        rt = lk_runtime_new(conf, err, sizeof(err));
    if (rt == NULL || lk_workers_reload(rt, &st, err, sizeof(err)) != 0) {
        lk_runtime_free(rt);
        lk_conf_unref(conf);
        lk_reloads_failed++;
        lk_log(LK_ERR, NULL, "SIGHUP: reload refused: %s; still serving generation %llu", err,
               (unsigned long long)lk_workers_generation());
        return;
    }
    lk_reloads_ok++;
    /* The checks follow the generation: the new one's brokers and keys. */
    lk_health_stop(checked_rt);
    checked_rt = rt;
    if (lk_health_start(rt, lk_workers_main_base(), err, sizeof(err)) != 0)
        lk_log(LK_ERR, NULL, "SIGHUP: %s: brokers are not checked", err);
    lk_log_level = conf->log_level;
    drain_timeout_ms = conf->drain_timeout_ms;
    if (conf->workers != first_conf->workers)
        lk_log(LK_WARN, NULL, "SIGHUP: workers = %d needs a restart; still %d", conf->workers,
               first_conf->workers);
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
           conf_file, (unsigned long long)rt->generation, st.kept, st.added, st.removed);
    lk_conf_unref(conf); /* rt holds it */
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"check", no_argument, NULL, 't'},
        {"probe", no_argument, NULL, 'p'},        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *file = NULL;
    int check = 0, probe = 0, ch;
    char err[1024];

    while ((ch = getopt_long(argc, argv, "c:tpVh", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': file = optarg; break;
        case 't': check = 1; break;
        case 'p': probe = 1; break;
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
    struct lk_conf *conf = lk_conf_load(file, err, sizeof(err));
    if (conf == NULL) {
        fprintf(stderr, "lookout: %s\n", err);
        return probe ? 2 : 1;
    }
    lk_log_level = conf->log_level;
    struct lk_runtime *rt = lk_runtime_new(conf, err, sizeof(err));
    if (rt == NULL) {
        fprintf(stderr, "lookout: %s\n", err);
        lk_conf_unref(conf);
        return probe ? 2 : 1;
    }
    if (check) {
        lk_conf_dump(conf, stdout);
        printf("configuration %s is valid\n", file);
        lk_runtime_free(rt);
        lk_conf_unref(conf);
        lk_stats_free();
        return 0;
    }
    if (probe) {
        signal(SIGPIPE, SIG_IGN);
        int rc = lk_probe_run(rt, stdout);
        lk_runtime_free(rt);
        lk_conf_unref(conf);
        lk_stats_free();
        return rc;
    }
    signal(SIGPIPE, SIG_IGN);
    if (lk_access_configure(conf, err, sizeof(err)) != 0 ||
        lk_workers_start(rt, conf->workers, err, sizeof(err)) != 0 ||
        lk_admin_start(lk_workers_main_base(), conf, err, sizeof(err)) != 0 ||
        lk_health_start(rt, lk_workers_main_base(), err, sizeof(err)) != 0) {
        fprintf(stderr, "lookout: %s\n", err);
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
