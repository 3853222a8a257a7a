-- wrk script for bench/run: one parseable line at the end of a run.
-- BENCH_PATH (env) is the request path; BENCH_CLOSE=1 adds
-- `Connection: close` so that every request opens a new connection.
local path = os.getenv("BENCH_PATH") or "/"
local close = os.getenv("BENCH_CLOSE") == "1"

function init(args)
    wrk.path = path
    if close then
        wrk.headers["Connection"] = "close"
    end
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
        summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
        e.connect, e.read, e.write, e.status, e.timeout))
end
