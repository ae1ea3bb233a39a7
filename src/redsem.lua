#!lua
-- redsem: every semaphore operation, run atomically inside Redis.
--
-- The C side calls EVALSHA with the five keys below and the operation name
-- as ARGV[1].  The "#!lua" line (Redis 7+) declares the script with no
-- flags: Redis then refuses it as a whole on a read-only replica (READONLY)
-- or above maxmemory (OOM), instead of stopping it half-way.  All time
-- comes from redis.call('TIME'); the caller's clock is never used.
--
-- KEYS[1] owner    ZSET  id -> ticket       every member, in line order
-- KEYS[2] timeout  ZSET  id -> deadline ms  when the member ends unless
--                                           renewed (lease or keepalive)
-- KEYS[3] ticket   STRING                   the last ticket handed out
-- KEYS[4] info     HASH  id -> "lease_ms|max_holders|since_ms|origin"
-- KEYS[5] waiting  ZSET  id -> ticket       the members still in line
-- <base>wake:<id>  LIST                     a waiter's wake-up: its ticket,
--                                           pushed when it is promoted
-- <base>nudge:<id> LIST                     "n<ms>": look again in ms (a
--                                           list of its own: 0.1.0 waiters
--                                           take anything on their wake
--                                           list for a promotion)
-- (<base> is KEYS[1] without "owner": same hash tag, same Cluster slot.)
--
-- INVARIANTS.  They hold whenever a call of this script returns, error
-- replies included.  (A command Redis itself fails, e.g. WRONGTYPE on a key
-- that another program wrote, aborts the script: that is a key conflict
-- and the caller reports it as such.)
--
--  I1 Members.  A member is in owner, timeout and info.  It is a waiter
--     while it is in waiting, and a holder otherwise.
--  I2 Nobody expired.  No member's deadline has passed: every operation
--     first drops the members whose deadline is due (O(log N + dropped)).
--  I3 Holders fit.  A holder's rank in owner is below its own
--     max_holders.  Ranks never rise (tickets rise, newcomers join at the
--     end), so once true this stays true until the holder leaves: callers
--     that agree on the limit N never see more than N holders.
--  I4 First come, first served.  The first waiter does not fit (its rank
--     is at least its max_holders).  Promotion takes waiters in ticket
--     order and stops at the first that does not fit; a newcomer ranks
--     behind every waiter, so nobody gets ahead of a waiter.
--  I5 Key lifetime.  Every key above carries a TTL of at least the latest
--     deadline from now plus GRACE_MS, so Redis never drops the data of a
--     live member, and an idle semaphore leaves nothing behind GRACE_MS
--     after its last deadline.
--  I6 Promotion window.  A promoted waiter holds for min(lease,
--     PROMOTION_WINDOW_MS) until it confirms (wait_check or give_up); then
--     its full lease starts.  A waiter that died in line costs the line
--     seconds, not a lease; one paused past its window finds it lost.  The
--     waiter left at the head of the line by a promotion is nudged to look
--     again when the earliest deadline ahead of it is due, so it notices a
--     promoted waiter that never confirms as soon as its window ends.  A
--     wake or nudge list lives as long as the place or window it is about.
--  I7 Tickets rise.  A ticket is larger than every earlier ticket of the
--     semaphore, and at least Redis's clock in microseconds, so tickets
--     keep rising even after the keys expired: they are fencing tokens.
--
-- Every operation runs through dispatch(): arguments are checked, then
-- housekeeping() (I2, I4) runs, then the operation, then
-- restore_lifetimes() (I5).  No operation can return around it.
--
-- The timing constants are explained together with the C side's in
-- src/timing.h.

local K_OWNER, K_TIMEOUT, K_TICKET, K_INFO, K_WAITING =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local BASE = string.sub(K_OWNER, 1, -6)
local GRACE_MS = 1000
local PROMOTION_WINDOW_MS = 5000

local t = redis.call('TIME')
local NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Integers as exact decimal strings (tostring() would print 1e+15).
local function int(n)
    return string.format('%.0f', n)
end

local function wake_key(id)
    return BASE .. 'wake:' .. id
end

local function nudge_key(id)
    return BASE .. 'nudge:' .. id
end

-- Split an info value into its fields.
local function parse_info(v)
    if not v then return nil end
    local lease, maxh, since, origin = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
    return tonumber(lease), tonumber(maxh), tonumber(since), origin
end

local function make_info(lease, maxh, since, origin)
    return int(lease) .. '|' .. int(maxh) .. '|' .. int(since) .. '|' .. origin
end

local function is_member(id)
    return redis.call('ZSCORE', K_OWNER, id) ~= false
end

local function is_waiting(id)
    return redis.call('ZSCORE', K_WAITING, id) ~= false
end

-- Forget everything about one member.
local function remove(id)
    redis.call('ZREM', K_OWNER, id)
    redis.call('ZREM', K_TIMEOUT, id)
    redis.call('ZREM', K_WAITING, id)
    redis.call('HDEL', K_INFO, id)
    redis.call('DEL', wake_key(id), nudge_key(id))
end

-- I2: drop every member whose deadline is due.
local function expire()
    local dead = redis.call('ZRANGEBYSCORE', K_TIMEOUT, '-inf', NOW_MS)
    for i = 1, #dead do
        remove(dead[i])
    end
end

-- Milliseconds until the (pos+1)-th earliest deadline: a waiter at line
-- position pos cannot move into the window before that many members leave.
local function next_deadline_ms(pos)
    local r = redis.call('ZRANGE', K_TIMEOUT, pos, pos, 'WITHSCORES')
    if not r[2] then return -1 end
    return math.max(tonumber(r[2]) - NOW_MS, 0)
end

-- Replace the message on one of a waiter's lists, living as long as its
-- place (or its promotion window).
local function post(wk, id, message)
    local deadline = tonumber(redis.call('ZSCORE', K_TIMEOUT, id))
    redis.call('DEL', wk)
    redis.call('RPUSH', wk, message)
    redis.call('PEXPIRE', wk, int(math.max(deadline - NOW_MS, 0) + GRACE_MS))
end

-- I4, I6: turn waiters at the head of the line into holders while they fit
-- under their own limit; each gets the promotion window and a wake-up.  The
-- waiter then left at the head is nudged.
local function promote()
    local promoted = false
    while true do
        local head = redis.call('ZRANGE', K_WAITING, 0, 0)[1]
        if not head then return end
        local rank = redis.call('ZRANK', K_OWNER, head)
        local lease, maxh, _, origin = parse_info(redis.call('HGET', K_INFO, head))
        if not rank or not lease then
            remove(head)            -- not a whole member (I1): drop it
        elseif rank < maxh then
            local window = math.min(lease, PROMOTION_WINDOW_MS)
            redis.call('ZREM', K_WAITING, head)
            redis.call('ZADD', K_TIMEOUT, int(NOW_MS + window), head)
            redis.call('HSET', K_INFO, head, make_info(lease, maxh, NOW_MS, origin))
            post(wake_key(head), head, redis.call('ZSCORE', K_OWNER, head))
            promoted = true
        else
            if promoted then
                post(nudge_key(head), head,
                     'n' .. int(next_deadline_ms(math.max(rank - maxh, 0))))
            end
            return
        end
    end
end

local function housekeeping()
    expire()
    promote()
end

-- I5: give every key a TTL that outlives the latest deadline by GRACE_MS.
local function restore_lifetimes()
    local last = redis.call('ZRANGE', K_TIMEOUT, -1, -1, 'WITHSCORES')
    local ttl = GRACE_MS
    if last[2] then
        ttl = math.max(tonumber(last[2]) - NOW_MS, 0) + GRACE_MS
    end
    for _, k in ipairs({K_OWNER, K_TIMEOUT, K_TICKET, K_INFO, K_WAITING}) do
        redis.call('PEXPIRE', k, int(ttl))
    end
end

-- What a caller still in line is told: its ticket, how many are ahead of it
-- beyond the window, and when to look again at the latest.
local function waiting_reply(id, maxh)
    local rank = redis.call('ZRANK', K_OWNER, id)
    local pos = math.max(rank - maxh, 0)
    return {'waiting', redis.call('ZSCORE', K_OWNER, id), int(pos),
            int(next_deadline_ms(pos))}
end

-- I6: a holder confirms: its full lease starts now; its wake-up is spent.
local function confirm(id)
    local lease = parse_info(redis.call('HGET', K_INFO, id))
    redis.call('ZADD', K_TIMEOUT, 'XX', int(NOW_MS + lease), id)
    redis.call('DEL', wake_key(id))
    return {'held', redis.call('ZSCORE', K_OWNER, id), int(lease)}
end

-- acquire id max_holders lease_ms wait(0|1) keepalive_ms origin
local function op_acquire(id, maxh, lease, wait, keepalive, origin)
    if is_member(id) then
        return redis.error_reply('REDSEM duplicate holder id')
    end
    local last = tonumber(redis.call('GET', K_TICKET) or '0') or 0
    local ticket = int(math.max(last + 1, NOW_US))      -- I7
    redis.call('SET', K_TICKET, ticket)
    redis.call('ZADD', K_OWNER, ticket, id)
    local rank = redis.call('ZRANK', K_OWNER, id)
    if rank < maxh then
        redis.call('ZADD', K_TIMEOUT, int(NOW_MS + lease), id)
        redis.call('HSET', K_INFO, id, make_info(lease, maxh, NOW_MS, origin))
        return {'held', ticket, int(lease)}
    end
    if wait == 1 then
        redis.call('ZADD', K_TIMEOUT, int(NOW_MS + keepalive), id)
        redis.call('ZADD', K_WAITING, ticket, id)
        redis.call('HSET', K_INFO, id, make_info(lease, maxh, 0, origin))
        return waiting_reply(id, maxh)
    end
    redis.call('ZREM', K_OWNER, id)
    return {'busy', ticket, int(rank)}
end

-- wait_check id keepalive_ms: keep a place in line alive, or confirm the
-- slot it was promoted to.
local function op_wait_check(id, keepalive)
    if not is_member(id) then return {'lost'} end
    if not is_waiting(id) then return confirm(id) end
    local _, maxh = parse_info(redis.call('HGET', K_INFO, id))
    redis.call('ZADD', K_TIMEOUT, 'XX', int(NOW_MS + keepalive), id)
    return waiting_reply(id, maxh)
end

-- give_up id: leave the line, unless promotion came just in time.
local function op_give_up(id)
    if not is_member(id) then return {'lost'} end
    if not is_waiting(id) then return confirm(id) end
    remove(id)
    promote()
    return {'gone'}
end

-- release id: 1 if it was a live holder, 0 otherwise; nothing of it remains.
local function op_release(id)
    local held = is_member(id) and not is_waiting(id)
    remove(id)
    promote()
    if held then return 1 end
    return 0
end

-- refresh id lease_ms(0 = as acquired): the new lease in ms, or 0 if the
-- caller holds no slot (then nothing of it remains, unless it waits).
local function op_refresh(id, lease)
    if not is_member(id) then
        remove(id)
        return 0
    end
    if is_waiting(id) then return 0 end
    if lease <= 0 then
        lease = parse_info(redis.call('HGET', K_INFO, id)) or 0
        if lease <= 0 then return 0 end
    end
    redis.call('ZADD', K_TIMEOUT, 'XX', int(NOW_MS + lease), id)
    return int(lease)
end

-- token id: the holder's ticket, or nil.
local function op_token(id)
    if is_waiting(id) then return false end
    return redis.call('ZSCORE', K_OWNER, id)
end

-- list: every member in line order as {id, ticket, ms left, waiting, info}.
local function op_list()
    local all = redis.call('ZRANGE', K_OWNER, 0, -1, 'WITHSCORES')
    local out = {}
    for i = 1, #all, 2 do
        local id = all[i]
        local deadline = redis.call('ZSCORE', K_TIMEOUT, id)
        local left = -1
        if deadline then left = tonumber(deadline) - NOW_MS end
        local waiting = 0
        if is_waiting(id) then waiting = 1 end
        out[#out + 1] = {id, all[i + 1], int(left), int(waiting),
                         redis.call('HGET', K_INFO, id) or ''}
    end
    return out
end

-- Argument checkers: each returns the value, or nil if malformed.
local function id_arg(v)
    if type(v) == 'string' and #v > 0 and #v <= 100 and
       not string.find(v, '[^%w%.%-_:]') then
        return v
    end
end

local function count_arg(v)
    local n = tonumber(v)
    if n and n >= 0 and n <= 1e12 and n == math.floor(n) then return n end
end

-- Each operation: how to read ARGV, and what to run.
local OPS = {
    acquire = function(a)
        local id, maxh, lease = id_arg(a[2]), count_arg(a[3]), count_arg(a[4])
        local wait, keepalive = count_arg(a[5]), count_arg(a[6])
        if not (id and maxh and lease and wait and keepalive and a[7]) or
           maxh < 1 or lease < 1 or keepalive < 1 then return nil end
        return function() return op_acquire(id, maxh, lease, wait, keepalive, a[7]) end
    end,
    wait_check = function(a)
        local id, keepalive = id_arg(a[2]), count_arg(a[3])
        if not (id and keepalive) or keepalive < 1 then return nil end
        return function() return op_wait_check(id, keepalive) end
    end,
    give_up = function(a)
        local id = id_arg(a[2])
        if not id then return nil end
        return function() return op_give_up(id) end
    end,
    release = function(a)
        local id = id_arg(a[2])
        if not id then return nil end
        return function() return op_release(id) end
    end,
    refresh = function(a)
        local id, lease = id_arg(a[2]), count_arg(a[3])
        if not (id and lease) then return nil end
        return function() return op_refresh(id, lease) end
    end,
    token = function(a)
        local id = id_arg(a[2])
        if not id then return nil end
        return function() return op_token(id) end
    end,
    list = function(a)
        return function() return op_list() end
    end,
}

-- The only way in: check, housekeeping, the operation, restore lifetimes.
local function dispatch(a)
    local parse = OPS[a[1]]
    if not parse then
        return redis.error_reply('REDSEM unknown operation')
    end
    local run = parse(a)
    if not run then
        return redis.error_reply('REDSEM bad arguments for ' .. a[1])
    end
    housekeeping()
    local reply = run()
    restore_lifetimes()
    return reply
end

return dispatch(ARGV)
