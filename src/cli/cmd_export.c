/* ctrain-dist export CKPT --format npz|safetensors -o FILE: the checkpoint
 * verified and restored into its own model (the session of eval: recorded
 * config, no training set, no run directory), then its parameters and
 * buffers written by rank 0 (report/export.h) for NumPy / PyTorch users. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "report/export.h"
#include "train/session.h"
#include "train/state.h"

static const struct ct_cli_option options[] = {
    CT_CLI_OPTION("--format", NULL, CT_CLI_VALUE, format, NULL),
    CT_CLI_OPTION("--output", "-o", CT_CLI_VALUE, output, NULL),
    CT_CLI_END,
};

static int check(const struct ct_cli_args *a)
{
    int rc = ct_cli_refuse(a, CT_CLI_NO_GENERATE | CT_CLI_NO_PREDICT);
    if (rc == 0 && (!a->format || !a->output || !*a->output))
        rc = ct_error_set(CT_EUSAGE, "export needs --format npz|safetensors and -o FILE");
    if (rc == 0)
        rc = ct_cli_refuse(a, CT_CLI_NO_CONFIG);
    return rc ? rc : ct_cli_check_checkpoint_command(a);
}

/* The model's parameters and buffers under their state_dict names, in
 * state_dict order (parameters first, then the running statistics). */
static int export_views(const struct ct_layout *lay, const struct ct_flat *f,
                        struct ct_export_tensor *t, int n)
{
    for (int i = 0; i < lay->n; i++)
        t[n++] = (struct ct_export_tensor){.name = lay->views[i].name, .ndim = lay->views[i].ndim,
                                           .shape = lay->views[i].shape,
                                           .data = f->data + lay->views[i].offset};
    return n;
}

/* Rank 0: the restored model written to a->output. */
static int write_model(const struct ct_cli_args *a, enum ct_export_format format, const struct ct_ckpt *ck,
                       const struct ct_config *cfg, const struct ct_model *m)
{
    int n = m->layout.n + m->buffer_layout.n;
    struct ct_export_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
    if (!t)
        return ct_error_set(CT_ENOMEM, "export: out of memory");
    char step[32], epoch[32];
    snprintf(step, sizeof step, "%lld", (long long)ct_ckpt_step(ck));
    snprintf(epoch, sizeof epoch, "%lld", (long long)ct_ckpt_epoch(ck));
    const struct ct_export_meta meta[] = {
        {"format", "ctrain-dist state_dict"}, {"checkpoint", a->checkpoint},
        {"model", cfg->model.name}, {"step", step}, {"epoch", epoch},
        {"code_version", ct_ckpt_code_version(ck)}, {"config", ct_ckpt_config_text(ck)},
    };
    int k = export_views(&m->layout, &m->params, t, 0);
    k = export_views(&m->buffer_layout, &m->buffers, t, k);
    int rc = ct_export_write_model(a->output, format, cfg->model.name, t, k, meta,
                                   (int)(sizeof meta / sizeof meta[0]));
    if (rc >= 0) {
        printf("%s: %d tensors (%zu parameters) of %s (step %s) as %s\n", a->output, rc,
               ct_model_param_count(m), a->checkpoint, step, a->format);
        rc = 0;
    }
    free(t);
    return rc;
}

/* The checkpoint's model restored into a session of its own, then written. */
static int export_session(struct ct_comm *comm, const struct ct_cli_args *a, enum ct_export_format format,
                          const struct ct_ckpt *ck, const struct ct_config *cfg)
{
    struct ct_session *s = calloc(1, sizeof *s);
    struct ct_session_params sp = {.train = 0, .digests = 0};
    int rc = ct_comm_agree(comm, s ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    int have_session = rc == 0 && (rc = ct_session_init(s, cfg, comm, &sp)) == 0;
    if (have_session)
        rc = ct_comm_agree(comm, ct__model_restore(&s->model, ck));
    if (rc == 0)
        rc = ct_comm_agree(comm, comm->rank == 0 ? write_model(a, format, ck, cfg, &s->model) : 0);
    if (have_session)
        ct_session_free(s);
    free(s);
    return rc;
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    int format;
    int rc = ct_comm_agree(comm, ct_cli_parse_format(a->format, ct_export_format_names, -1, &format));
    if (rc < 0)
        return ct_cli_fail(comm, CT_EXIT_USAGE);
    struct ct_cli_recorded r;
    rc = ct_cli_recorded_open(comm, &r, a->checkpoint, NULL, 0);
    if (rc == 0)
        rc = export_session(comm, a, (enum ct_export_format)format, r.ck, r.cfg);
    ct_cli_recorded_close(&r);
    return ct_cli_recorded_status(comm, &r, rc);
}

const struct ct_cli_command ct_cli_export = {
    .name = "export",
    .synopsis = "export CHECKPOINT --format npz|safetensors -o FILE",
    .summary = "write a checkpoint's parameters and buffers for NumPy / PyTorch users",
    .help = "  --format npz         a ZIP of .npy files, numpy.load(FILE)[name]\n"
            "  --format safetensors the safetensors format (JSON header, raw float32)\n"
            "  -o, --output FILE    the file to write (atomically)\n"
            "\n"
            "Names and shapes are the state_dict's (an nn.Sequential called `layers`); a gpt's\n"
            "are nanoGPT's (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...,\n"
            "lm_head.weight: the tied head, wte's values).\n",
    .options = options,
    .operand = CT_CLI_CHECKPOINT_FIRST,
    .check = check,
    .run = run,
};
