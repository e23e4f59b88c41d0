/* The transport the ranks' traffic actually takes, for run.json and the
 * checkpoint manifest: which MPI, for Open MPI the PML and BTLs and the TCP
 * interfaces, for MPICH its device and UCX's transports and devices, the
 * interfaces that carry TCP connections to other hosts (seen in the
 * process's own sockets), whether ranks share a host, and which allreduce
 * runs. Each value says how it is known: "in use" (observed), "requested"
 * (a setting: MPI_T control variable or environment), "derived" (from a
 * documented rule of the MPI). Not here: choosing anything (allreduce.h).
 *
 *     struct ct_transport t;
 *     rc = ct_transport_probe(comm, &t);          // collective, after set-up
 *     for (int i = 0; i < CT_TRANSPORT_N_KEYS; i++)
 *         printf("%s = %s\n", ct_transport_keys[i], ct_transport_value(&t, i));
 */
#ifndef CT_PARALLEL_TRANSPORT_H
#define CT_PARALLEL_TRANSPORT_H

#include "parallel/comm.h"

/* The keys, in order (run.json: "transport_<key>"; manifest: "<key>"). */
enum ct_transport_key {
    CT_TRANSPORT_MPI,       /* "openmpi", "mpich", "other", "none" */
    CT_TRANSPORT_PML,       /* Open MPI's PML, MPICH's device */
    CT_TRANSPORT_BTL,       /* Open MPI's BTLs: requested, initialised, per peer */
    CT_TRANSPORT_TCP_IF,    /* the TCP interfaces asked for (btl_tcp_if_include, UCX_NET_DEVICES) */
    CT_TRANSPORT_UCX,       /* UCX_TLS (MPICH on UCX, Open MPI's pml ucx) */
    CT_TRANSPORT_LINKS,     /* in use: interfaces with TCP connections to other hosts, per host */
    CT_TRANSPORT_HOSTS,     /* hosts and ranks per host: can ranks share memory */
    CT_TRANSPORT_ALLREDUCE, /* which allreduce runs for gradients (allreduce.h) */
    CT_TRANSPORT_N_KEYS
};
extern const char *const ct_transport_keys[]; /* "mpi", "pml", ... */

#define CT_TRANSPORT_VALUE_MAX 256

struct ct_transport {
    char v[CT_TRANSPORT_N_KEYS][CT_TRANSPORT_VALUE_MAX];
};

/* Fill *t. Collective (a gather of each rank's host and sockets, a message
 * to each ring neighbour first so that those connections exist); every rank
 * gets rank 0's view of the whole job. */
int ct_transport_probe(struct ct_comm *c, struct ct_transport *t);
static inline const char *ct_transport_value(const struct ct_transport *t, int key)
{
    return t->v[key];
}

#endif
