/*
 * A plain main() for a fuzz harness, so that `make check` replays its
 * corpus without libFuzzer (and under gcc): every file of the directories
 * (or the files) given goes through LLVMFuzzerTestOneInput once.  An
 * invariant that fails aborts, as it would under libFuzzer.  Prints the
 * number of inputs replayed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    do {
        if (cap - len < 4096) {
            cap = cap != 0 ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            if (buf == NULL)
                abort();
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n != 0);
    fclose(f);
    /* an exact-size copy, so that ASan sees a read past the end */
    uint8_t *exact = malloc(len != 0 ? len : 1);
    if (exact == NULL)
        abort();
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

int
main(int argc, char **argv)
{
    unsigned long count = 0;
    int rc = 0;

    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            rc = 1;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            if (replay_file(argv[i]) != 0)
                rc = 1;
            else
                count++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, alphasort);
        if (n < 0) {
            perror(argv[i]);
            rc = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            if (names[k]->d_name[0] != '.') {
                snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
                if (replay_file(path) != 0)
                    rc = 1;
                else
                    count++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("%lu inputs replayed\n", count);
    return rc;
}
