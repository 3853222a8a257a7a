/*
 * Fuzzes the config reader and loader (proxy/lk_conf_load.c and its passes) over INI text in
 * memory.  Invariants: no crash, leak or undefined behaviour; the text
 * either loads (and then its map can be printed, as `lookout --check`
 * does), or the error says where: "fuzz.conf:LINE: " with LINE between 1
 * and the number of lines of the text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_conf_ready.h"
#include "lk_log.h"

static const char name[] = "fuzz.conf";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    char err[1024];
    size_t lines = 0;

    if (devnull == NULL && (devnull = fopen("/dev/null", "w")) == NULL)
        abort();
    lk_log_level = LK_ERR;
    /* lines as the reader counts them: one per '\n', plus an unended last one */
    for (size_t i = 0; i < size; i++)
        if (data[i] == '\n')
            lines++;
    if (size != 0 && data[size - 1] != '\n')
        lines++;

    memset(err, 'x', sizeof(err));
    struct lk_conf *conf = lk_conf_load_buf(name, (const char *)data, size, err, sizeof(err));
    if (conf != NULL) {
        lk_conf_dump(conf, devnull);
        lk_conf_unref(conf);
        return 0;
    }
    LK_FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
    LK_FUZZ_CHECK(strncmp(err, name, sizeof(name) - 1) == 0 && err[sizeof(name) - 1] == ':');
    char *end;
    const char *num = err + sizeof(name);
    LK_FUZZ_CHECK(*num >= '1' && *num <= '9');
    unsigned long line = strtoul(num, &end, 10);
    LK_FUZZ_CHECK(end[0] == ':' && end[1] == ' ');
    LK_FUZZ_CHECK(line >= 1 && line <= lines);
    return 0;
}
