-- pulsar_lookup: HAProxy Lua action that rewrites the broker URLs of a JSON
-- answer (Pulsar LookupData) into the edge's external addresses.  The body
-- has been buffered by `http-response wait-for-body`; every internal URL of
-- the map is replaced, plain text, as nginx's sub_filter does.
-- bench/run fills in the IP in at-signs.

local map = {
    { "pulsar://127.0.0.1:16650", "pulsar://@IP@:6650" },
    { "pulsar+ssl://127.0.0.1:16651", "pulsar+ssl://@IP@:6651" },
    { "http://127.0.0.1:18080", "http://@IP@:8080" },
    { "https://127.0.0.1:18443", "https://@IP@:8443" },
}

local function replace_all(s, from, to)
    local out, i, n = {}, 1, 0
    while true do
        local a, b = string.find(s, from, i, true)
        if a == nil then
            break
        end
        out[#out + 1] = string.sub(s, i, a - 1)
        out[#out + 1] = to
        i = b + 1
        n = n + 1
    end
    if n == 0 then
        return s, 0
    end
    out[#out + 1] = string.sub(s, i)
    return table.concat(out), n
end

-- HAProxy 2.6 gives an action no way to change a body in place (channels
-- refuse HTTP mode, HTTPMessage is for filters only), so the action reads the
-- body with res.body and, when a URL changed, answers with txn:done() and a
-- reply carrying the same status and headers and the new body; HAProxy sets
-- its Content-Length.
local drop = { ["content-length"] = true, ["transfer-encoding"] = true, ["connection"] = true }

core.register_action("pulsar_lookup", { "http-res" }, function(txn)
    local body = txn.sf:res_body()
    if body == nil or body == "" then
        return
    end
    local changed = 0
    for _, m in ipairs(map) do
        local n
        body, n = replace_all(body, m[1], m[2])
        changed = changed + n
    end
    if changed == 0 then
        return
    end
    local reply = txn:reply()
    reply:set_status(tonumber(txn.sf:status()))
    for name, values in pairs(txn.http:res_get_headers()) do
        if not drop[name] then
            for i = 0, #values do
                if values[i] ~= nil then
                    reply:add_header(name, values[i])
                end
            end
        end
    end
    reply:set_body(body)
    txn:done(reply)
end)
