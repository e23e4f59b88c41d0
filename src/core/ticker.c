/* The interruptible periodic thread of core/ticker.h. */
#include "core/ticker.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

int ct_ticker_start(struct ct_ticker *t, void *(*fn)(void *), void *arg)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    if (pthread_create(&t->thread, NULL, fn, arg) != 0) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        return -1;
    }
    t->running = 1;
    return 0;
}

int ct_ticker_nap(struct ct_ticker *t, double s)
{
    /* pthread_cond_timedwait takes CLOCK_REALTIME: a wall-clock jump makes
     * one nap longer or shorter, never a missed stop. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + (int64_t)(s * 1e9);
    until.tv_sec += ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    pthread_mutex_lock(&t->lock);
    while (!t->stop && pthread_cond_timedwait(&t->cond, &t->lock, &until) != ETIMEDOUT) {
    }
    int stop = t->stop;
    pthread_mutex_unlock(&t->lock);
    return stop;
}

void ct_ticker_stop(struct ct_ticker *t)
{
    if (!t->running)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    t->running = 0;
}
