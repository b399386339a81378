/* Printable names for chunk locations (shared by fold and later exporters). */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *cli_location_name(const cm_dict_t *d, uint32_t loc, char *buf, size_t size) {
    uint32_t f = d->location_function[loc];
    if (f && d->function_name[f]) { /* without a symbol version, as the aggregator shows it */
        cm_name_unversioned(d->strings[d->function_name[f]].ptr, buf, size);
        return buf;
    }
    uint32_t m = d->location_mapping[loc];
    if (m && d->mappings[m].filename) {
        const char *file = d->strings[d->mappings[m].filename].ptr;
        const char *base = strrchr(file, '/');
        snprintf(buf, size, "%s+0x%" PRIx64, base ? base + 1 : file, d->location_address[loc]);
        return buf;
    }
    snprintf(buf, size, "0x%" PRIx64, d->location_address[loc]);
    return buf;
}
