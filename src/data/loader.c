/* The prefetching data loader (see loader.h).
 *
 * Dims legend: B = samples of this rank per batch (global_batch / world),
 * S = sample_numel.
 *
 * A ring of prefetch + 1 slots is shared by two threads: the producer (the
 * prefetch thread) fills slots in order with what ct_sampler_next and
 * ct_dataset_gather give, and the caller takes them in the same order. A slot
 * is in exactly one state: free, ready (head .. head + nready - 1, at most
 * prefetch of them) or held by the caller (the batch it is working on, the
 * one before head, released at its next call). So the producer can always
 * fill the slot after the ready ones while fewer than prefetch are ready. The
 * producer owns the sampler while it runs; seek stops it first. This file
 * deliberately decides nothing about which samples come: that is the
 * sampler, so the loader cannot change a trajectory, only when the work is
 * done. There is no augmentation and no MPI here.
 */
#include "data/loader.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
#include "data/sampler.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

enum loader_slot_kind {
    LOADER_SLOT_BATCH,
    LOADER_SLOT_END, /* the end of epoch `epoch` */
};

struct loader_slot {
    enum loader_slot_kind kind;
    int64_t epoch, step; /* where it came from */
    int n;               /* B, or 0 for an end marker */
    float *x;            /* (B, S) */
    int32_t *y;          /* (B) */
    uint32_t *idx;       /* (B) */
};

struct ct__loader {
    const struct ct_dataset *ds; /* borrowed */
    struct ct_sampler sampler;   /* the producer's while the thread runs */
    int prefetch;
    int batch; /* B */
    int64_t steps_per_epoch;

    /* The caller's side: only the caller's thread touches these. */
    int64_t epoch, step; /* position of the next batch the caller gets */
    double wait_s;

    /* The ring: the fields below `mu` are guarded by it. */
    int nslots;
    struct loader_slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t can_take; /* a slot became ready */
    pthread_cond_t can_put;  /* a slot became free, or stop was set */
    int head;                /* oldest ready slot */
    int nready;
    int stop;
    int running;             /* the thread exists (caller's side only) */
    pthread_t thread;
};

struct ct_loader_params ct_loader_default_params(void)
{
    return (struct ct_loader_params){.prefetch = 2};
}

/* The unit of work, the same in both threads: the sampler's next step of
 * this rank gathered into `s`, or the end marker. `tid`: the thread, for
 * log.trace (core/trace.h). */
static void loader_produce(struct ct__loader *L, struct loader_slot *s, int tid)
{
    s->epoch = L->sampler.epoch;
    s->step = L->sampler.step;
    const uint32_t *idx;
    int n;
    if (!ct_sampler_next(&L->sampler, &idx, &n)) {
        s->kind = LOADER_SLOT_END;
        s->n = 0;
        return;
    }
    assert(n == L->batch);
    s->kind = LOADER_SLOT_BATCH;
    s->n = n;
    memcpy(s->idx, idx, (size_t)n * sizeof *idx);
    const int tr = ct_trace_on();
    const double t0 = tr ? ct_now_s() : 0.0;
    ct_dataset_gather(L->ds, s->idx, (size_t)n, s->epoch, s->x, s->y);
    if (tr)
        ct_trace_span(tid, "loader", "batch", t0, ct_now_s());
}

static void *loader_thread(void *arg)
{
    struct ct__loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        /* At most `prefetch` ready, whether or not the caller holds one. */
        while (!L->stop && L->nready == L->prefetch)
            pthread_cond_wait(&L->can_put, &L->mu);
        if (L->stop)
            break;
        /* The slot after the ready ones is free: the caller's, if it holds
         * one, is the one before head, and nready < prefetch = nslots - 1.
         * Neither thread looks at a free slot but the producer. */
        int t = (L->head + L->nready) % L->nslots;
        pthread_mutex_unlock(&L->mu);
        loader_produce(L, &L->slots[t], CT_TRACE_LOADER);
        pthread_mutex_lock(&L->mu);
        L->nready++;
        pthread_cond_signal(&L->can_take);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

static int loader_start(struct ct__loader *L)
{
    L->head = 0;
    L->nready = 0;
    L->stop = 0;
    if (L->prefetch == 0)
        return 0;
    /* The thread blocks every signal, so that SIGUSR1 (preemption), SIGINT
     * and friends keep going to the threads that handle them. It inherits
     * the mask in force when it is created. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&L->thread, NULL, loader_thread, L);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
        return ct_error_set(err == EAGAIN ? CT_ENOMEM : CT_ESTATE,
                            "loader: cannot start the prefetch thread: %s", strerror(err));
    L->running = 1;
    return 0;
}

static void loader_stop(struct ct__loader *L)
{
    if (!L->running)
        return;
    pthread_mutex_lock(&L->mu);
    L->stop = 1;
    pthread_cond_broadcast(&L->can_put);
    pthread_mutex_unlock(&L->mu);
    pthread_join(L->thread, NULL);
    L->running = 0;
}

static void loader_free_slots(struct ct__loader *L)
{
    for (int i = 0; L->slots && i < L->nslots; i++) {
        free(L->slots[i].x);
        free(L->slots[i].y);
        free(L->slots[i].idx);
    }
    free(L->slots);
    L->slots = NULL;
}

int ct_loader_init(struct ct_loader *l, const struct ct_dataset *train, int global_batch,
                   uint64_t seed, int world, int rank, const struct ct_loader_params *p)
{
    l->impl = NULL;
    struct ct_loader_params params = p ? *p : ct_loader_default_params();
    if (params.prefetch < 0 || params.prefetch > CT_LOADER_MAX_PREFETCH)
        return ct_error_set(CT_EINVAL, "loader: prefetch = %d is out of range 0..%d",
                            params.prefetch, CT_LOADER_MAX_PREFETCH);
    if (train->n > UINT32_MAX)
        return ct_error_set(CT_EINVAL, "loader: %zu samples are more than the sampler indexes",
                            train->n);
    struct ct__loader *L = calloc(1, sizeof *L);
    if (!L)
        return ct_error_set(CT_ENOMEM, "loader: out of memory");
    int rc = ct_sampler_init(&L->sampler, (uint32_t)train->n, global_batch, seed, world, rank);
    if (rc < 0)
        goto fail_sampler;
    L->ds = train;
    L->prefetch = params.prefetch;
    L->batch = global_batch / world;
    L->steps_per_epoch = ct_sampler_steps_per_epoch(train->n, global_batch);

    L->nslots = params.prefetch + 1;
    L->slots = calloc((size_t)L->nslots, sizeof *L->slots);
    rc = L->slots ? 0 : CT_ENOMEM;
    for (int i = 0; rc == 0 && i < L->nslots; i++) {
        struct loader_slot *s = &L->slots[i];
        s->x = malloc((size_t)L->batch * train->sample_numel * sizeof *s->x);
        s->y = malloc((size_t)L->batch * (train->targets ? (size_t)train->targets : 1) * sizeof *s->y);
        s->idx = malloc((size_t)L->batch * sizeof *s->idx);
        if (!s->x || !s->y || !s->idx)
            rc = CT_ENOMEM;
    }
    if (rc < 0) {
        rc = ct_error_set(CT_ENOMEM, "loader: out of memory for %d batch buffers of %d samples",
                          L->nslots, L->batch);
        goto fail_slots;
    }

    if (pthread_mutex_init(&L->mu, NULL) != 0) {
        rc = ct_error_set(CT_ENOMEM, "loader: cannot create a mutex");
        goto fail_slots;
    }
    if (pthread_cond_init(&L->can_take, NULL) != 0) {
        rc = ct_error_set(CT_ENOMEM, "loader: cannot create a condition variable");
        goto fail_mutex;
    }
    if (pthread_cond_init(&L->can_put, NULL) != 0) {
        rc = ct_error_set(CT_ENOMEM, "loader: cannot create a condition variable");
        goto fail_take;
    }
    if ((rc = loader_start(L)) < 0)
        goto fail_put;
    l->impl = L;
    return 0;

fail_put:
    pthread_cond_destroy(&L->can_put);
fail_take:
    pthread_cond_destroy(&L->can_take);
fail_mutex:
    pthread_mutex_destroy(&L->mu);
fail_slots:
    loader_free_slots(L);
    ct_sampler_free(&L->sampler);
fail_sampler:
    free(L);
    return rc;
}

/* The next slot in order: produced here with prefetch 0, else taken from
 * the ring (which implicitly releases the one the caller held). */
static const struct loader_slot *loader_take(struct ct__loader *L)
{
    if (L->prefetch == 0) {
        loader_produce(L, &L->slots[0], CT_TRACE_MAIN); /* prefetch 0: the caller's thread */
        return &L->slots[0];
    }
    pthread_mutex_lock(&L->mu);
    while (L->nready == 0)
        pthread_cond_wait(&L->can_take, &L->mu);
    int s = L->head;
    L->head = (L->head + 1) % L->nslots;
    L->nready--;
    /* Room for one more ready batch: the slot after the ready ones is free
     * (the caller's previous one, or one never used). */
    pthread_cond_signal(&L->can_put);
    pthread_mutex_unlock(&L->mu);
    return &L->slots[s];
}

int ct_loader_next(struct ct_loader *l, struct ct_batch *b)
{
    memset(b, 0, sizeof *b);
    struct ct__loader *L = l->impl;
    if (!L || (L->prefetch > 0 && !L->running))
        return ct_error_set(CT_ESTATE, "loader: next() on a loader that is not running");
    double t0 = ct_now_s();
    const struct loader_slot *s = loader_take(L);
    double dt = ct_now_s() - t0;
    L->wait_s += dt > 0 ? dt : 0;

    b->epoch = s->epoch;
    b->step = s->step;
    if (s->kind == LOADER_SLOT_END) {
        L->epoch = s->epoch + 1;
        L->step = 0;
        return 0;
    }
    b->n = s->n;
    b->x = s->x;
    b->y = s->y;
    b->idx = s->idx;
    L->epoch = s->epoch;
    L->step = s->step + 1;
    return 1;
}

int ct_loader_seek(struct ct_loader *l, int64_t epoch, int64_t step)
{
    struct ct__loader *L = l->impl;
    if (!L)
        return ct_error_set(CT_ESTATE, "loader: seek() on a loader that is not initialised");
    if (epoch < 0 || step < 0 || step > L->steps_per_epoch)
        return ct_error_set(CT_EINVAL,
                            "loader: cannot seek to epoch %lld, step %lld (an epoch has %lld steps)",
                            (long long)epoch, (long long)step, (long long)L->steps_per_epoch);
    loader_stop(L);
    ct_sampler_seek(&L->sampler, epoch, step);
    L->epoch = epoch;
    L->step = step;
    return loader_start(L);
}

int64_t ct_loader_epoch(const struct ct_loader *l) { return l->impl->epoch; }
int64_t ct_loader_step(const struct ct_loader *l) { return l->impl->step; }
int64_t ct_loader_steps_per_epoch(const struct ct_loader *l) { return l->impl->steps_per_epoch; }
double ct_loader_wait_s(const struct ct_loader *l) { return l->impl->wait_s; }

int ct_loader_ready(const struct ct_loader *l)
{
    struct ct__loader *L = l->impl;
    if (L->prefetch == 0)
        return 0;
    pthread_mutex_lock(&L->mu);
    int n = L->nready;
    pthread_mutex_unlock(&L->mu);
    return n;
}

void ct_loader_free(struct ct_loader *l)
{
    if (!l || !l->impl)
        return;
    struct ct__loader *L = l->impl;
    loader_stop(L);
    pthread_cond_destroy(&L->can_put);
    pthread_cond_destroy(&L->can_take);
    pthread_mutex_destroy(&L->mu);
    loader_free_slots(L);
    ct_sampler_free(&L->sampler);
    free(L);
    l->impl = NULL;
}
