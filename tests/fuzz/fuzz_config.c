/* libFuzzer harness: the config parser (src/config/parse.c, value.c), an INI text
 * plus `--set` overrides.
 *
 * Input (README.md):  flags:u8  [len:u32le INI text]  override\0override\0...
 * flags:
 *   0x01  write the INI text to a file and use ct_config_load (the CLI's
 *         path: fopen, and the text may hold NUL bytes); otherwise
 *         ct_config_load_text (a checkpoint's recorded config; the text
 *         ends at its first NUL)
 *   0x02  also ct_config_list in TSV form (otherwise the table)
 * After the INI part, up to 16 NUL-separated strings are the overrides, in
 * order, as `--set` passes them.
 * A config that loads must round-trip: its resolved text (what checkpoints
 * record and resume reads back) loads again, and compares equal (checked
 * here, abort otherwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SETS 16

static FILE *g_null;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ct_fuzz_dir();
    g_null = fopen("/dev/null", "w");
    if (!g_null)
        abort();
    return 0;
}

static void round_trip(const struct ct_config *cfg)
{
    char *text = NULL;
    if (ct_config_text(cfg, &text) < 0) {
        fprintf(stderr, "fuzz_config: ct_config_text failed: %s\n", ct_error_message());
        abort();
    }
    static struct ct_config back;
    if (ct_config_load_text(&back, text, cfg->path, NULL, 0) < 0) {
        fprintf(stderr, "fuzz_config: the resolved config does not load again: %s\n--\n%s--\n",
                ct_error_message(), text);
        abort();
    }
    char diff[4096];
    int n_runtime = 0;
    int n = ct_config_diff(cfg, &back, diff, sizeof diff, &n_runtime);
    if (n != 0 || n_runtime != 0) {
        fprintf(stderr, "fuzz_config: the resolved config reads back different:\n%s\n", diff);
        abort();
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    const uint8_t *ini;
    size_t ini_len;
    ct_fuzz_take(&p, &n, &ini, &ini_len);

    /* The overrides: NUL-terminated copies of the rest, split at NULs. */
    char *rest = malloc(n + 1);
    if (!rest)
        abort();
    memcpy(rest, p, n);
    rest[n] = '\0';
    const char *sets[MAX_SETS];
    int n_sets = 0;
    for (size_t i = 0; i < n && n_sets < MAX_SETS;) {
        sets[n_sets++] = rest + i;
        i += strlen(rest + i) + 1;
    }

    static struct ct_config cfg;
    int rc;
    if (flags & 0x01) {
        ct_fuzz_write("fuzz.ini", ini, ini_len);
        char path[512];
        ct_fuzz_path(path, sizeof path, "fuzz.ini");
        rc = ct_config_load(&cfg, path, sets, n_sets);
    } else {
        char *text = malloc(ini_len + 1);
        if (!text)
            abort();
        memcpy(text, ini, ini_len);
        text[ini_len] = '\0';
        rc = ct_config_load_text(&cfg, text, "fuzz.ini", sets, n_sets);
        free(text);
    }
    ct_fuzz_verbose("ct_config_load", rc);
    if (rc == 0) {
        (void)ct_config_write(&cfg, g_null);
        (void)ct_config_list(g_null, &cfg, (flags & 0x02) != 0);
        struct ct_config def;
        ct_config_defaults(&def);
        char diff[2048];
        int n_runtime;
        (void)ct_config_diff(&def, &cfg, diff, sizeof diff, &n_runtime);
        round_trip(&cfg);
    }
    free(rest);
    return 0;
}
