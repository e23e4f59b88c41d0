/* The transport probe (see transport.h). Open MPI's settings come from its
 * MPI_T control variables (the portable way: the value in force, whether
 * set by --mca, the environment or a file); which components Open MPI kept
 * is read from which components' variables are still registered after
 * MPI_Init (it closes, and deregisters, the ones it did not select).
 * MPICH's UCX is configured only through the environment, so that is what
 * is reported, as requested. What is in use on the wire is observed: the
 * interfaces of this process's established TCP connections whose far end
 * is not one of this host's addresses (Linux /proc; IPv4). */
#include "parallel/comm-impl.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "parallel/transport.h"

const char *const ct_transport_keys[] = {"mpi", "pml", "btl", "tcp_if", "ucx", "links", "hosts",
                                         "allreduce", NULL};

#define V CT_TRANSPORT_VALUE_MAX

/* snprintf whose truncation is wanted: values are capped at V bytes. */
static void put(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

/* An MPI_T string control variable's value; 0 if it is not registered. */
static int cvar_string(const char *name, char *out, size_t n)
{
    int idx;
    if (MPI_T_cvar_get_index(name, &idx) != MPI_SUCCESS)
        return 0;
    MPI_T_cvar_handle h;
    int count;
    if (MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) != MPI_SUCCESS)
        return 0;
    char buf[4096] = ""; /* Open MPI says 2048 for every string */
    int ok = count < (int)sizeof buf && MPI_T_cvar_read(h, buf) == MPI_SUCCESS;
    MPI_T_cvar_handle_free(&h);
    if (ok)
        put(out, n, "%s", buf[0] ? buf : "(all)");
    return ok;
}

static int cvar_exists(const char *name)
{
    int idx;
    return MPI_T_cvar_get_index(name, &idx) == MPI_SUCCESS;
}

/* The components of `framework` whose "<framework>_<c>_<var>" is registered. */
static void registered(const char *framework, const char *const *comps, const char *var, char *out,
                       size_t n)
{
    out[0] = '\0';
    for (const char *const *p = comps; *p; p++) {
        char name[96];
        put(name, sizeof name, "%s_%s_%s", framework, *p, var);
        if (cvar_exists(name))
            put(out + strlen(out), n - strlen(out), "%s%s", out[0] ? "," : "", *p);
    }
}

/* A setting: the MPI_T variable, else the environment, saying which. */
static void setting(const char *cvar, const char *env, char *out, size_t n)
{
    char v[512];
    const char *e = env ? getenv(env) : NULL;
    if (cvar && cvar_string(cvar, v, sizeof v))
        put(out, n, "%s=%s (requested, MPI_T)", cvar, v);
    else if (e)
        put(out, n, "%s=%s (requested, environment)", env, e);
    else
        put(out, n, "%s unset (the MPI's default)", env ? env : cvar);
}

static void probe_openmpi(struct ct_transport *t, const struct ct_comm *c)
{
    static const char *const pmls[] = {"ob1", "ucx", "cm", "v", "monitoring", NULL};
    static const char *const btls[] = {"self", "vader", "sm", "tcp", "openib", "uct", "ofi",
                                       "usnic", "smcuda", NULL};
    char kept[128], req[512];
    registered("pml", pmls, "priority", kept, sizeof kept);
    setting("pml", "OMPI_MCA_pml", req, sizeof req);
    put(t->v[CT_TRANSPORT_PML], V, "%s (in use: the only PML left registered after MPI_Init); %s",
        kept[0] && !strchr(kept, ',') ? kept : "unknown", req);
    if (strcmp(kept, "ob1") == 0) {
        registered("btl", btls, "exclusivity", kept, sizeof kept);
        setting("btl", "OMPI_MCA_btl", req, sizeof req);
        const int vader = strstr(kept, "vader") != NULL, tcp = strstr(kept, "tcp") != NULL;
        put(t->v[CT_TRANSPORT_BTL], V,
                 "%s; initialised %s; derived per peer: other hosts %s, "
                 "this host %s",
                 req, kept, tcp ? "tcp" : "not tcp", c->local_world < 2 ? "none (alone)"
                                                    : vader ? "vader (shared memory)" : "tcp");
    } else {
        put(t->v[CT_TRANSPORT_BTL], V, "none (the PML is not ob1)");
    }
    setting("btl_tcp_if_include", "OMPI_MCA_btl_tcp_if_include", t->v[CT_TRANSPORT_TCP_IF], V);
    setting(NULL, "UCX_TLS", t->v[CT_TRANSPORT_UCX], V);
}

static void probe_mpich(struct ct_transport *t, const char *lib)
{
    const char *dev = strstr(lib, "--with-device=");
    char d[64] = "unknown";
    if (dev)
        sscanf(dev + strlen("--with-device="), "%63[^ \n'\"]", d);
    put(t->v[CT_TRANSPORT_PML], V, "device %s (built in)", d);
    put(t->v[CT_TRANSPORT_BTL], V, "none (MPICH)");
    setting(NULL, "UCX_NET_DEVICES", t->v[CT_TRANSPORT_TCP_IF], V);
    char tls[V];
    setting(NULL, "UCX_TLS", tls, sizeof tls);
    put(t->v[CT_TRANSPORT_UCX], V, "%s%s", tls,
             getenv("UCX_TLS") ? "" : ": UCX may use shared memory between namespaces of one machine");
}

/* ---------------------------------------------------------------- sockets */

/* Is a (network order) IPv4 address one of this host's? Its interface name. */
static int own_address(uint32_t a, char *ifname, size_t n)
{
    struct ifaddrs *ifs = NULL, *i;
    int found = 0;
    if (getifaddrs(&ifs) != 0)
        return 0;
    for (i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr == a) {
            found = 1;
            if (ifname)
                put(ifname, n, "%s", i->ifa_name);
        }
    freeifaddrs(ifs);
    return found;
}

static int my_socket(unsigned long inode)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    struct dirent *e;
    char want[64], path[300], link[64];
    put(want, sizeof want, "socket:[%lu]", inode);
    int found = 0;
    while (!found && (e = readdir(d))) {
        put(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len > 0) {
            link[len] = '\0';
            found = strcmp(link, want) == 0;
        }
    }
    closedir(d);
    return found;
}

/* This process's interfaces with an established TCP connection to another
 * host ("eth0" or "eth0,ib0"), "none" when there is none. */
static void tcp_links(char *out, size_t n)
{
    put(out, n, "none");
    FILE *f = fopen("/proc/self/net/tcp", "r");
    if (!f)
        return;
    char line[512];
    size_t used = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned la, ra, lp, rp, st;
        unsigned long inode;
        if (sscanf(line, " %*d: %x:%x %x:%x %x %*x:%*x %*x:%*x %*x %*u %*d %lu", &la, &lp, &ra, &rp,
                   &st, &inode) != 6 || st != 1 /* ESTABLISHED */)
            continue;
        char ifname[IF_NAMESIZE + 1] = "";
        /* /proc prints the address as the host-order number of its bytes. */
        if (own_address(ra, NULL, 0) || !own_address(la, ifname, sizeof ifname) ||
            !my_socket(inode) || strstr(out, ifname))
            continue;
        int w = snprintf(out + used, n - used, "%s%s", used ? "," : "", ifname);
        if (w > 0 && (size_t)w < n - used)
            used += (size_t)w;
    }
    fclose(f);
}

/* ---------------------------------------------------------------- the job */

struct rank_view {
    char host[64];
    char links[64];
};

/* Touch both ring neighbours, so that the connections our ring uses exist
 * (MPI opens them lazily). */
static int touch_neighbours(const struct ct_comm *c)
{
    const struct ct__mpi_ctx *m = c->ctx;
    char a = 0, b = 0;
    int err = MPI_Sendrecv(&a, 1, MPI_BYTE, (c->rank + 1) % c->world, 7, &b, 1, MPI_BYTE,
                           (c->rank + c->world - 1) % c->world, 7, m->ring, MPI_STATUS_IGNORE);
    return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "transport probe: MPI_Sendrecv");
}

/* Rank 0: hosts, ranks per host and each host's links from every rank's view. */
static void summarise(struct ct_transport *t, const struct rank_view *all, int world)
{
    int hosts = 0, most = 0;
    char *links = t->v[CT_TRANSPORT_LINKS];
    links[0] = '\0';
    for (int r = 0; r < world; r++) {
        int first = 1, same = 0;
        for (int q = 0; q < world; q++)
            if (strcmp(all[q].host, all[r].host) == 0) {
                same++;
                first &= q >= r;
            }
        most = same > most ? same : most;
        if (!first)
            continue;
        hosts++;
        size_t u = strlen(links);
        if (u + 80 < V)
            put(links + u, V - u, "%s%s %s", u ? "; " : "", all[r].host, all[r].links);
    }
    put(t->v[CT_TRANSPORT_HOSTS], V, "%d host%s, at most %d rank%s per host: %s", hosts,
             hosts == 1 ? "" : "s", most, most == 1 ? "" : "s",
             most > 1 ? "ranks on one host may use shared memory" : "no two ranks share a host");
}

int ct_transport_probe(struct ct_comm *c, struct ct_transport *t)
{
    memset(t, 0, sizeof *t);
    put(t->v[CT_TRANSPORT_ALLREDUCE], V, "%s", ct_comm_allreduce_name(c));
    if (c->ops != &ct__comm_mpi_ops) {
        put(t->v[CT_TRANSPORT_MPI], V, "none");
        for (int k = CT_TRANSPORT_PML; k < CT_TRANSPORT_ALLREDUCE; k++)
            put(t->v[k], V, "none (one process)");
        return 0;
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, provided;
    MPI_Get_library_version(lib, &len);
    const int mpi_t = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS;
    if (strstr(lib, "Open MPI")) {
        put(t->v[CT_TRANSPORT_MPI], V, "openmpi");
        probe_openmpi(t, c);
    } else if (strstr(lib, "MPICH")) {
        put(t->v[CT_TRANSPORT_MPI], V, "mpich");
        probe_mpich(t, lib);
    } else {
        put(t->v[CT_TRANSPORT_MPI], V, "other");
    }
    if (mpi_t)
        MPI_T_finalize();
    int rc = c->world > 1 ? touch_neighbours(c) : 0;
    struct rank_view me, *all = NULL;
    memset(&me, 0, sizeof me);
    put(me.host, sizeof me.host, "%s", c->host);
    tcp_links(me.links, sizeof me.links);
    if (rc == 0 && c->rank == 0 && !(all = calloc((size_t)c->world, sizeof *all)))
        rc = ct_error_set(CT_ENOMEM, "transport probe: out of memory");
    rc = ct_comm_agree(c, rc);
    if (rc == 0)
        rc = ct_comm_gather(c, &me, sizeof me, all, 0);
    if (rc == 0 && c->rank == 0) {
        summarise(t, all, c->world);
        size_t u = strlen(t->v[CT_TRANSPORT_LINKS]);
        put(t->v[CT_TRANSPORT_LINKS] + u, V - u,
                 " (in use: interfaces of established TCP connections to other hosts)");
    }
    free(all);
    if (rc == 0)
        rc = ct_comm_bcast(c, t, sizeof *t, 0);
    return rc;
}
