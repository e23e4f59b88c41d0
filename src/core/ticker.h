/* A background thread that sleeps in naps a stop request cuts short: the
 * skeleton of the periodic threads (the hang watchdog's heartbeat, the run
 * directory owner's beat). The thread's function does its work between
 * naps and returns when ct_ticker_nap says it was asked to stop.
 *
 *     static void *beat_main(void *arg) {
 *         struct beat *b = arg;
 *         while (!ct_ticker_nap(&b->tick, 1.0))
 *             write_beat(b);
 *         return NULL;
 *     }
 *     if (ct_ticker_start(&b->tick, beat_main, b) < 0) ...   // -1: no thread
 *     ct_ticker_stop(&b->tick);   // wakes it, joins it; safe if never started
 */
#ifndef CT_CORE_TICKER_H
#define CT_CORE_TICKER_H

#include <pthread.h>

struct ct_ticker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop, running;
};

/* Starts fn(arg) on a new thread; -1 (nothing left behind) when it cannot. */
int ct_ticker_start(struct ct_ticker *t, void *(*fn)(void *), void *arg);
/* From the thread: sleep s seconds unless asked to stop; 1 when asked. */
int ct_ticker_nap(struct ct_ticker *t, double s);
/* Ask the thread to stop, wake it and join it. */
void ct_ticker_stop(struct ct_ticker *t);

#endif
