#!lua name=solo
-- bench/solo.lua - a bound, not a design: what an idle semaphore's
-- acquire + release would cost in a "one-key" layout, for bench/script_cpu.sh
-- (issue 21, target 1, where redsem makes four keys for an idle semaphore's
-- first member and its release deletes them).  In that layout the only
-- member of an idle semaphore lives in the ticket string itself
-- ("ticket|id|since|lease|origin", with the keys' TTL) and in owner, so
-- that owner still counts it; a second member would unfold it into the
-- usual keys.  Nothing here checks what the real script would (no
-- deadline, no other member, no stored limit): every figure is a lower
-- bound.  Loaded two ways:
--   solo_bare: the clock, the state read and the member count as bare
--     commands (TIME, HMGET, ZCARD), then the layout's three writes
--   bench/script_cpu.sh's "solo" cut of redsem's own library: the same
--     three writes after redsem's own argument checks, begin() and
--     read_state(), so the difference is what those cost a call

-- solo tail begins (bench/script_cpu.sh copies it into redsem's library)
-- acquire: take the ticket and write the record in one SET; owner counts
-- the member.  release: read the record, drop the member, leave the ticket.
local function solo_tail(keys, a, now_us, now_ms)
    local k_ticket = string.sub(keys[1], 1, -6) .. 'ticket'
    if a[1] == 'acquire' then
        local last = redis.call('SET', k_ticket, now_us .. '|' .. a[2] .. '|' .. now_ms ..
                                '|' .. a[5] .. '|' .. a[8], 'PX', '61000', 'GET')
        if last and string.find(last, '|', 1, true) then
            return redis.error_reply('solo: not idle')
        end
        redis.call('ZADD', keys[1], now_us, a[2])
        redis.call('PEXPIRE', keys[1], '61000')
        return {'held', now_us, a[5]}
    end
    local r = redis.call('GET', k_ticket) or ''
    local i = string.find(r, '|', 1, true)
    if not i or string.sub(r, i + 1, i + #a[2]) ~= a[2] then
        return redis.error_reply('solo: not the member')
    end
    redis.call('ZREM', keys[1], a[2])
    redis.call('SET', k_ticket, string.sub(r, 1, i - 1), 'PX', '1000')
    return 1
end
-- solo tail ends

-- Zeros that pad TIME's microseconds to six digits.
local PAD = {'00000', '0000', '000', '00', '0', ''}

-- The bare version: the clock, the state and the count as commands only.
local function bare(keys, a)
    local t = redis.call('TIME')
    redis.call('HMGET', string.sub(keys[1], 1, -6) .. 'state', 'limit', 'cur', 'tl', 'tt', 'x')
    redis.call('ZCARD', keys[1])
    local us6 = PAD[#t[2]] .. t[2]
    return solo_tail(keys, a, t[1] .. us6, t[1] .. string.sub(us6, 1, 3))
end
redis.register_function('solo_bare', bare)
