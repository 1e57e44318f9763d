/* Active health checks of the upstream groups with a health_path: placeholder. */
#include "http/upstream.h"

int md_upstream_health_start(md_upstreams *us);
void md_upstream_health_stop(md_upstreams *us);

int md_upstream_health_start(md_upstreams *us)
{
    (void)us;
    return 0;
}

void md_upstream_health_stop(md_upstreams *us)
{
    (void)us;
}
