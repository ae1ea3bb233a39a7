#!lua name=floor
-- bench/floor.lua - the baselines of bench/script_cpu.sh and
-- bench/instructions.sh: an empty function (what any FCALL costs), and a
-- four-command one, about the least any semaphore kept in Redis hashes and
-- sorted sets can cost per operation (no checks at all).
local function empty() return 1 end
-- TIME, HMGET, then ZADD + HSET (acquire) or ZREM + HSET (release)
local function four(keys, a)
    -- (the keys as redsem makes them: from the owner key it is given)
    local base = string.sub(keys[1], 1, -6)
    local k_timeout, k_state = base .. 'timeout', base .. 'state'
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local v = redis.call('HMGET', k_state, 'n', 'i:' .. a[2])
    local n = tonumber(v[1]) or 0
    if a[1] == 'acquire' then
        redis.call('ZADD', k_timeout, string.format('%d', now + 30000), a[2])
        redis.call('HSET', k_state, 'n', n + 1, 'i:' .. a[2], now)
    else
        redis.call('ZREM', k_timeout, a[2])
        redis.call('HSET', k_state, 'n', n - 1)
    end
    return 1
end
redis.register_function('floor_empty', empty)
redis.register_function('floor_four', four)
