-- wrk script for bench/run: one parseable line at the end of a run.
-- BENCH_PATH (env) is the request path; BENCH_CLOSE=1 adds
-- `Connection: close` so that every request opens a new connection.
local path = os.getenv("BENCH_PATH") or "/"
local close = os.getenv("BENCH_CLOSE") == "1"
local rate = tonumber(os.getenv("BENCH_RATE") or "")

function init(args)
    wrk.path = path
    if close then
        wrk.headers["Connection"] = "close"
    end
end

-- BENCH_RATE: at most that many requests per second in all (wrk -t1), on a
-- fixed schedule: each request waits for the next free slot, one every
-- 1/rate s, whichever connection it is on.  A run that falls more than
-- 10 ms behind starts the schedule again from now instead of catching up in
-- a burst, so a target that cannot keep up shows a lower req/s.  wrk's
-- delay() is in whole milliseconds; slots are rounded to the nearest one.
if rate and rate > 0 then
    local ffi = require("ffi")
    ffi.cdef[[
        typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
        int clock_gettime(int clock, bench_timespec *ts);
    ]]
    local ts = ffi.new("bench_timespec")
    local gap = 1000 / rate
    local slot

    local function now_ms()
        ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
        return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
    end

    function delay()
        local t = now_ms()
        if slot == nil or slot < t - 10 then
            slot = t
        end
        slot = slot + gap
        return math.max(0, math.floor(slot - t + 0.5))
    end
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
        summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
        e.connect, e.read, e.write, e.status, e.timeout))
end
