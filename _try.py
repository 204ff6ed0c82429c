import time, numpy as np
from codegen.pricing.time import TimePricer
tp = TimePricer("deepseek-v3", system="dgx_h100")
t0=time.time()
r = tp(d=16, t=4, p=16, ep=8, per_stage=True)
print(time.time()-t0, r.bottleneck_s, r.bottleneck_stage, {k: v for k, v in r.by_dimension.items()})
for k, v in r.stages["time_s"].items(): print(k, v[0, :3], r.stages["calls_count"][k][0,:2], r.stages["msg_bytes"][k][0,:1])
print(r.stages["total_s"][0])
