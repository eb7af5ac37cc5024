"""Load runs: the same request trace at rising concurrency and request rate, speculation on and off.

A load run sends a task suite's questions as requests to a target that serves many at once
(llama-server with several slots, vLLM, any OpenAI-compatible server, or specbench's own loop
with continuous batching) at each *load point*: a fixed number of requests in flight (closed
loop, `--concurrency 1,2,4,8`) or an open-loop arrival rate (`--request-rate`, Poisson or gamma
arrivals, seeded). Every method of the run replays the same trace at every point, so each
speculative request is paired with the same request decoded without speculation.

`store/load.py` holds the records every backend writes and the reports read (and the `Backend` protocol); `trace.py` makes
the traces; backends serve a point; `driver.py` runs the points, resumably.
"""
