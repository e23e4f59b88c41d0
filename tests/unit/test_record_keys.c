/* The records' key tables (src/run/record_keys.c): every table well formed
 * (names unique, members inside the struct, gates naming a key, CSV columns
 * numbered 1..n once each), and docs/records.md exactly what the tables
 * print, so that the key list in the docs cannot drift from the code.
 * `test_record_keys --write FILE` writes that page (how docs/records.md is
 * made after a key is added).
 */
#include "ct_test.h"
#include "run/record.h"

#define DOCS_PATH CT_FIXTURE_DIR "/../../docs/records.md"

static void page(FILE *f)
{
    fputs("# The run's records: key list\n\n"
          "Generated from the key tables in src/run/record_keys.c by\n"
          "`build/tests/test_record_keys --write docs/records.md`; the unit test\n"
          "test_record_keys fails when this page and the tables differ. \"Optional since\":\n"
          "files written before that date lack the key, and a reader fills in the default\n"
          "shown in brackets; \"required\" keys are in every file. A key that is written\n"
          "only under a condition is listed with it (\"when\"). Numbers that are not finite\n"
          "are written as null.\n\n", f);
    for (const struct ct_rec_schema *const *s = ct_rec_schemas; *s; s++)
        ct_rec_markdown(f, *s);
}

static char *page_text(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    page(f);
    fclose(f);
    return buf;
}

static void test_tables_well_formed(void)
{
    for (const struct ct_rec_schema *const *sp = ct_rec_schemas; *sp; sp++) {
        const struct ct_rec_schema *s = *sp;
        int csv_seen[64] = {0}, max_csv = 0;
        CU_ASSERT(s->n_keys <= CT_REC_MAX_KEYS);
        for (size_t i = 0; i < s->n_keys; i++) {
            const struct ct_rec_key *k = &s->keys[i];
            CU_ASSERT_PTR_EQUAL(ct_rec_find(s, k->name), k); /* unique */
            CU_ASSERT(k->doc && k->doc[0]);
            CU_ASSERT(k->type < CT_REC_TYPE_COUNT);
            if (k->gate != CT_REC_ALWAYS) {
                int found = 0;
                for (size_t j = 0; j < s->n_keys; j++)
                    found |= s->keys[j].offset == k->gate_offset;
                CU_ASSERT(found);
            }
            if (k->type == CT_REC_RANKS)
                CU_ASSERT(s->world_offset != SIZE_MAX && s->owned_offset != SIZE_MAX);
            CU_ASSERT(k->csv >= 0 && k->csv < 64);
            if (k->csv > 0 && k->csv < 64) {
                CU_ASSERT_EQUAL(csv_seen[k->csv], 0);
                csv_seen[k->csv] = 1;
                max_csv = k->csv > max_csv ? k->csv : max_csv;
            }
        }
        for (int c = 1; c <= max_csv; c++)
            CU_ASSERT_EQUAL(csv_seen[c], 1);
    }
}

static void test_docs_up_to_date(void)
{
    char *want = page_text();
    size_t len = 0;
    char *have = (char *)ct_test_read_file(DOCS_PATH, &len);
    if (!have || strcmp(have, want) != 0)
        fprintf(stderr, "\n    %s differs from the key tables: run\n"
                "    build/tests/test_record_keys --write docs/records.md\n", DOCS_PATH);
    CU_ASSERT(have && strcmp(have, want) == 0);
    free(have);
    free(want);
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--write") == 0) {
        FILE *f = fopen(argv[2], "w");
        if (!f) {
            perror(argv[2]);
            return 1;
        }
        page(f);
        return fclose(f) == 0 ? 0 : 1;
    }
    static const struct ct_test_case cases[] = {
        {"tables_well_formed", test_tables_well_formed},
        {"docs_up_to_date", test_docs_up_to_date},
        {NULL, NULL},
    };
    return ct_test_run("record_keys", cases);
}
