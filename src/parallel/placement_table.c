/* The binding table (see placement.h): one line per rank, like
 * `mpirun --report-bindings`, then each distinct warning once. Formatting
 * only: the records come from ct_placement_apply or ct_placement_from_plan.
 */
#include "parallel/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

enum { C_RANK, C_HOST, C_LOCAL, C_PUS, C_CORES, C_NUMA, C_BLAS, C_DEV, C_BY, C_MEM, NCOL };

static const char *const head[NCOL] = {"rank", "host", "local", "PUs", "cores",
                                       "NUMA", "BLAS", "device", "bound by", "memory"};

typedef char row_cells[NCOL][600];

/* "0-3,5" from a sorted list of ranks. */
static void ranks_str(char *buf, size_t n, const int *r, int count)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && used < n; i++) {
        int j = i;
        while (j + 1 < count && r[j + 1] == r[j] + 1)
            j++;
        used += (size_t)snprintf(buf + used, n - used, j > i ? "%s%d-%d" : "%s%d", i ? "," : "",
                                 r[i], r[j]);
        i = j;
    }
}

static void fill_row(row_cells cell, const struct ct_placement *r)
{
    const size_t n = sizeof cell[0];
    snprintf(cell[C_RANK], n, "%d", r->rank);
    snprintf(cell[C_HOST], n, "%s", r->host);
    snprintf(cell[C_LOCAL], n, "%d/%d", r->local_rank, r->local_world);
    snprintf(cell[C_PUS], n, "%s", r->cpus);
    snprintf(cell[C_CORES], n, "%d%s", r->ncores, r->oversubscribed ? "*" : "");
    snprintf(cell[C_NUMA], n, "%s", r->numa);
    snprintf(cell[C_BLAS], n, "%d", r->threads);
    snprintf(cell[C_DEV], n, "%s%s%s", r->device, r->device_pci[0] ? " " : "", r->device_pci);
    snprintf(cell[C_BY], n, "%s", r->bound_by);
    snprintf(cell[C_MEM], n, "%s", r->membind);
}

/* One line: numbers right-aligned, the last column unpadded. */
static void print_row(FILE *f, const int *w, const char *const *cell)
{
    for (int k = 0; k < NCOL; k++) {
        int right = k == C_RANK || k == C_CORES || k == C_BLAS;
        if (k == NCOL - 1)
            fprintf(f, "%s\n", cell[k]);
        else
            fprintf(f, right ? "%*s  " : "%-*s  ", w[k], cell[k]);
    }
}

/* The title: mode, ranks and distinct hosts. */
static void print_title(FILE *f, const struct ct_placement *recs, int n)
{
    int hosts = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(recs[i].host, recs[j].host) == 0;
        hosts += !seen;
    }
    fprintf(f, "placement %s: %d rank%s on %d node%s\n", ct_placement_mode_name(recs[0].mode), n,
            n == 1 ? "" : "s", hosts, hosts == 1 ? "" : "s");
}

/* Header and rows, column widths from the content. */
static void print_rows(FILE *f, const struct ct_placement *recs, int n, row_cells cell)
{
    int w[NCOL];
    const char *line[NCOL];
    for (int k = 0; k < NCOL; k++)
        w[k] = (int)strlen(head[k]);
    for (int i = 0; i < n; i++) {
        fill_row(cell, &recs[i]);
        for (int k = 0; k < NCOL; k++)
            if ((int)strlen(cell[k]) > w[k])
                w[k] = (int)strlen(cell[k]);
    }
    print_row(f, w, head);
    for (int k = 0; k < NCOL; k++)
        line[k] = cell[k];
    for (int i = 0; i < n; i++) {
        fill_row(cell, &recs[i]);
        print_row(f, w, line);
    }
}

/* The oversubscription note, then each distinct warning once, with the
 * ranks it concerns (done and ranks: n entries of scratch). */
static void print_warnings(FILE *f, const struct ct_placement *recs, int n, char *done, int *ranks)
{
    int any_over = 0;
    for (int i = 0; i < n; i++)
        any_over |= recs[i].oversubscribed;
    if (any_over)
        fprintf(f, "(* oversubscribed: the rank shares its cores with other ranks)\n");
    for (int i = 0; i < n; i++) {
        if (done[i] || !recs[i].warning[0])
            continue;
        int count = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && strcmp(recs[j].warning, recs[i].warning) == 0) {
                done[j] = 1;
                ranks[count++] = recs[j].rank;
            }
        char rs[256];
        ranks_str(rs, sizeof rs, ranks, count);
        fprintf(f, "warning (rank%s %s): %s\n", count == 1 ? "" : "s", rs, recs[i].warning);
    }
}

int ct_placement_format(const struct ct_placement *recs, int n, char **text_out)
{
    *text_out = NULL;
    if (n < 1)
        return ct_error_set(CT_EINVAL, "placement table: no records");
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    int *ranks = malloc((size_t)n * sizeof *ranks);
    char *done = calloc((size_t)n, 1);
    row_cells *cell = malloc(sizeof *cell);
    if (f && ranks && done && cell) {
        print_title(f, recs, n);
        print_rows(f, recs, n, *cell);
        print_warnings(f, recs, n, done, ranks);
    }
    int ok = f && ranks && done && cell;
    free(ranks);
    free(done);
    free(cell);
    if ((f && fclose(f) != 0) || !ok) {
        free(text);
        return ct_error_set(CT_ENOMEM, "placement table: out of memory");
    }
    *text_out = text;
    return 0;
}

int ct_placement_table(struct ct_comm *c, const struct ct_placement *mine, char **text_out)
{
    *text_out = NULL;
    struct ct_placement *all = NULL;
    int rc = 0;
    if (c->rank == 0 && !(all = calloc((size_t)c->world, sizeof *all)))
        rc = ct_error_set(CT_ENOMEM, "placement table: out of memory");
    if ((rc = ct_comm_agree(c, rc)) < 0) {
        free(all);
        return rc;
    }
    rc = ct_comm_gather(c, mine, sizeof *mine, all, 0);
    if (rc == 0 && c->rank == 0)
        rc = ct_placement_format(all, c->world, text_out);
    free(all);
    rc = ct_comm_agree(c, rc);
    if (rc < 0) {
        free(*text_out);
        *text_out = NULL;
    }
    return rc;
}
