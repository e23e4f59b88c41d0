/* The multi-file sample table (see filetable.h). */
#include "data/filetable.h"

#include <stdint.h>

#include "core/error.h"

int ct_filetable_add(struct ct_filetable *t, const char *path, size_t count, const char *unit)
{
    if (t->n >= CT_FILETABLE_MAX_FILES)
        return ct_error_set(CT_ERANGE, "%s: more than %d files in the data set", path,
                            CT_FILETABLE_MAX_FILES);
    t->first[t->n + 1] = t->first[t->n] + count;
    t->n++;
    if (t->first[t->n] > UINT32_MAX)
        return ct_error_set(CT_EFORMAT, "%s: more than %lu %s in the data set", path,
                            (unsigned long)UINT32_MAX, unit);
    return 0;
}

int ct_filetable_find(const struct ct_filetable *t, size_t i)
{
    int lo = 0, hi = t->n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (t->first[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
