/* The aggregator's query layer (analysis library): include this one header. Storage- and
 * HTTP-independent: a store query fills an agg_profile_t, the HTTP API and the CLI call the
 * views, the diff and the exports. See README.md. */
#ifndef AGG_QUERY_H
#define AGG_QUERY_H

#include "diff.h"
#include "diff_endpoints.h"
#include "export.h"
#include "filter.h"
#include "insights.h"
#include "kpms.h"
#include "print.h"
#include "profile.h"
#include "span.h"
#include "stats.h"
#include "views.h"

#endif
