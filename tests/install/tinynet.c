/* tinynet: the C API example. A program of its own, built against an
 * INSTALLED libctrain through pkg-config alone (see build.sh), that defines a
 * model from the library's modules, registers it under a name of its own, and
 * trains it data-parallel with the library's trainer, exactly as ctrain-dist
 * trains the zoo's models: the same config file format (model.name =
 * tinynet), run directory, metrics, checkpoints and resume.
 *
 *     mpirun -np 2 ./tinynet tinynet.ini runs/tinynet [--set S.K=V]...
 *
 * It is deliberately not a second ctrain-dist: no subcommands, no signal
 * handling, no watchdog (src/cli/cmd_train.c shows those). Exit status: 0 trained,
 * 2 a bad command line or config, 1 anything else; every rank exits with the
 * same status, because every failure is agreed on (ct_comm_agree) before any
 * rank gives up.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "models/models.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "parallel/comm.h"
#include "train/trainer.h"

#define MAX_SETS 32

/* What the builder takes from the program rather than from the config: the
 * registry hands this pointer back to every build. */
struct tinynet_opts {
    int norm; /* BatchNorm1d after the hidden Linear */
};

/* Linear(D, H) [-BatchNorm1d(H)] -ReLU-Dropout(p)-Linear(H, classes), with
 * H = model.hidden's first entry and p = model.dropout from the config: the
 * [model] keys reach a registered model as they reach the zoo's. The model
 * is a sequential container; each ct_model_add checks that the module's
 * input size is the previous one's output (and takes ownership, also of a
 * NULL that a failed constructor returned: it reports that as an error). */
static int tinynet_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx)
{
    const struct tinynet_opts *o = ctx;
    if (spec->n_hidden != 1)
        return ct_error_set(CT_EINVAL, "tinynet: model.hidden must be one width, found %d",
                            spec->n_hidden);
    const int D = spec->in_c * spec->in_h * spec->in_w, H = spec->hidden[0];
    int rc = ct_model_add(m, ct_linear_new(D, H, 1));
    if (rc == 0 && o->norm)
        rc = ct_model_add(m, ct_batchnorm1d_new(H, spec->bn_sync));
    if (rc == 0)
        rc = ct_model_add(m, ct_relu_new((size_t)H));
    if (rc == 0)
        rc = ct_model_add(m, ct_dropout_new((size_t)H, spec->dropout));
    if (rc == 0)
        rc = ct_model_add(m, ct_linear_new(H, spec->n_classes, 1));
    return rc;
}

static int usage(struct ct_comm *comm, const char *argv0)
{
    if (comm->rank == 0)
        fprintf(stderr, "usage: %s CONFIG RUN_DIR [--set SECTION.KEY=VALUE]...\n", argv0);
    return 2;
}

/* Collective: register the model, load the config, train, report. */
static int run(struct ct_comm *comm, int argc, char **argv)
{
    if (argc < 3)
        return usage(comm, argv[0]);
    const char *sets[MAX_SETS];
    int n_sets = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--set") != 0 || i + 1 == argc || n_sets == MAX_SETS)
            return usage(comm, argv[0]);
        sets[n_sets++] = argv[++i];
    }

    /* Before the config is loaded: model.name is checked against the
     * registry, which now holds mlp, cnn, resnet, vit and tinynet. */
    static struct tinynet_opts opts = {.norm = 1};
    int rc = ct_comm_agree(comm, ct_model_register("tinynet", tinynet_build, &opts));
    static struct ct_config cfg;
    int bad_config = 0;
    if (rc == 0) {
        rc = ct_comm_agree(comm, ct_config_load(&cfg, argv[1], sets, n_sets));
        bad_config = rc == CT_ECONFIG;
    }
    if (rc < 0) {
        /* rank 0's message names every failing rank once */
        if (comm->rank == 0)
            fprintf(stderr, "tinynet: error: %s\n", ct_error_message());
        return bad_config ? 2 : 1;
    }

    struct ct_trainer *tr;
    rc = ct_trainer_open(&tr, &cfg, comm, argv[2], "auto");
    if (rc < 0) {
        if (comm->rank == 0)
            fprintf(stderr, "tinynet: error: %s\n", ct_error_message());
        return rc == CT_ECONFIG ? 2 : 1;
    }
    struct ct_train_summary sum;
    rc = ct_trainer_run(tr, &sum);
    if (rc < 0) {
        /* A failure inside the step loop may have hit one rank only while
         * the others wait in a collective: end the job (see src/cli/cmd_train.c). */
        fprintf(stderr, "tinynet: error on rank %d: %s\n", comm->rank, ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (comm->rank == 0)
        printf("tinynet: %lld steps, %zu parameters, %.0f samples/s; test_acc %.4f test_loss %.4f\n",
               (long long)sum.steps, ct_model_param_count(ct_trainer_model(tr)), sum.samples_per_s,
               sum.last.test_acc, sum.last.test_loss);
    ct_trainer_close(tr);
    return 0;
}

int main(int argc, char **argv)
{
    /* The trainer's loader thread never calls MPI: FUNNELED is enough. */
    int provided;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "tinynet: error: MPI_Init_thread failed\n");
        return 1;
    }
    struct ct_comm comm;
    MPI_Comm world = MPI_COMM_WORLD;
    if (ct_comm_init_mpi(&comm, &world) < 0) {
        fprintf(stderr, "tinynet: error: %s\n", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ct_log_init(comm.rank, comm.world, CT_LOG_LEVEL_INFO);
    int status = run(&comm, argc, argv);
    ct_comm_free(&comm);
    MPI_Finalize();
    return status;
}
