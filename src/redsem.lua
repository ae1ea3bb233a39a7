-- redsem: every semaphore operation, run atomically inside Redis.
--
-- One script, one SHA: the C side calls EVALSHA with the operation name as
-- ARGV[1]. All time comes from redis.call('TIME'); the caller's clock is
-- never used.
--
-- KEYS[1] owner    ZSET  id -> ticket      holders and waiters, in line order
-- KEYS[2] timeout  ZSET  id -> deadline ms lease end (holders) or place
--                                          keepalive end (waiters)
-- KEYS[3] ticket   STRING                  last ticket handed out
-- KEYS[4] info     HASH  id -> "lease_ms|max_holders|since_ms|origin"
-- KEYS[5] waiting  ZSET  id -> ticket      the subset of owner still waiting
-- Each waiter also has a wake list <base>wake:<id>, pushed when it is
-- promoted to holder; <base> is KEYS[1] without its "owner" suffix.
--
-- A member of owner whose rank is below its max_holders is a holder unless
-- it is still in waiting; promote() keeps that true after every change, so
-- a newcomer's rank counts everyone who arrived before it (no barging).

local K_OWNER, K_TIMEOUT, K_TICKET, K_INFO, K_WAITING =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local BASE = string.sub(K_OWNER, 1, -6)
local GRACE_MS = 1000

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

-- Split an info value into its fields.
local function parse_info(v)
    if not v then return nil end
    local lease, maxh, since, origin = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
    return tonumber(lease), tonumber(maxh), tonumber(since), origin
end

local function make_info(lease, maxh, since, origin)
    return int(lease) .. '|' .. int(maxh) .. '|' .. int(since) .. '|' .. origin
end

-- Forget everything about one member.
local function remove(id)
    redis.call('ZREM', K_OWNER, id)
    redis.call('ZREM', K_TIMEOUT, id)
    redis.call('ZREM', K_WAITING, id)
    redis.call('HDEL', K_INFO, id)
    redis.call('DEL', wake_key(id))
end

-- Drop every member whose deadline has passed: O(log N + expired).
local function expire()
    local dead = redis.call('ZRANGEBYSCORE', K_TIMEOUT, '-inf', NOW_MS)
    for i = 1, #dead do
        remove(dead[i])
    end
    return #dead
end

-- Turn waiters at the head of the line into holders while they fit under
-- their own limit. Stops at the first that does not fit, so the line stays
-- FIFO. Each promotion is O(log N).
local function promote()
    local n = 0
    while true do
        local head = redis.call('ZRANGE', K_WAITING, 0, 0)[1]
        if not head then return n end
        local rank = redis.call('ZRANK', K_OWNER, head)
        local lease, maxh, _, origin = parse_info(redis.call('HGET', K_INFO, head))
        if not rank or not lease then
            remove(head)
        elseif rank < maxh then
            local ticket = redis.call('ZSCORE', K_OWNER, head)
            redis.call('ZREM', K_WAITING, head)
            redis.call('ZADD', K_TIMEOUT, int(NOW_MS + lease), head)
            redis.call('HSET', K_INFO, head, make_info(lease, maxh, NOW_MS, origin))
            local wk = wake_key(head)
            redis.call('DEL', wk)
            redis.call('RPUSH', wk, ticket)
            redis.call('PEXPIRE', wk, int(lease + GRACE_MS))
            n = n + 1
        else
            return n
        end
    end
end

-- Give every key a TTL that outlives the latest deadline by GRACE_MS.
local function touch()
    local last = redis.call('ZRANGE', K_TIMEOUT, -1, -1, 'WITHSCORES')
    local ttl = GRACE_MS
    if last[2] then
        ttl = math.max(tonumber(last[2]) - NOW_MS, 0) + GRACE_MS
    end
    for _, k in ipairs({K_OWNER, K_TIMEOUT, K_TICKET, K_INFO, K_WAITING}) do
        redis.call('PEXPIRE', k, int(ttl))
    end
end

-- Milliseconds until the (pos+1)-th earliest deadline: a waiter at line
-- position pos cannot move into the window before that many members leave.
local function next_deadline_ms(pos)
    local r = redis.call('ZRANGE', K_TIMEOUT, pos, pos, 'WITHSCORES')
    if not r[2] then return -1 end
    return math.max(tonumber(r[2]) - NOW_MS, 0)
end

local function housekeeping()
    expire()
    promote()
end

-- What a caller still in line is told: its ticket, how many are ahead of it
-- beyond the window, and when to look again at the latest.
local function waiting_reply(id, ticket, maxh)
    local rank = redis.call('ZRANK', K_OWNER, id)
    local pos = math.max(rank - maxh, 0)
    return {'waiting', ticket, int(pos), int(next_deadline_ms(pos))}
end

local function held_reply(id)
    local ticket = redis.call('ZSCORE', K_OWNER, id)
    local deadline = redis.call('ZSCORE', K_TIMEOUT, id)
    return {'held', ticket, int(tonumber(deadline) - NOW_MS)}
end

-- acquire id max_holders lease_ms wait(0|1) keepalive_ms origin
local function op_acquire(id, maxh, lease, wait, keepalive, origin)
    housekeeping()
    if redis.call('ZSCORE', K_OWNER, id) then
        return redis.error_reply('REDSEM duplicate holder id')
    end
    local last = tonumber(redis.call('GET', K_TICKET) or '0') or 0
    -- Tickets keep rising even after an idle semaphore's keys expired.
    local ticket = int(math.max(last + 1, NOW_US))
    redis.call('SET', K_TICKET, ticket)
    redis.call('ZADD', K_OWNER, ticket, id)
    local rank = redis.call('ZRANK', K_OWNER, id)
    if rank < maxh then
        redis.call('ZADD', K_TIMEOUT, int(NOW_MS + lease), id)
        redis.call('HSET', K_INFO, id, make_info(lease, maxh, NOW_MS, origin))
        touch()
        return {'held', ticket, int(lease)}
    end
    if wait == 1 then
        redis.call('ZADD', K_TIMEOUT, int(NOW_MS + keepalive), id)
        redis.call('ZADD', K_WAITING, ticket, id)
        redis.call('HSET', K_INFO, id, make_info(lease, maxh, 0, origin))
        touch()
        return waiting_reply(id, ticket, maxh)
    end
    redis.call('ZREM', K_OWNER, id)
    touch()
    return {'busy', ticket, int(rank)}
end

-- After housekeeping: the reply for a caller no longer in line (its place
-- expired, or it was promoted), or nil if it is still waiting.
local function left_the_line(id)
    housekeeping()
    if not redis.call('ZSCORE', K_OWNER, id) then
        return {'lost'}
    end
    if not redis.call('ZSCORE', K_WAITING, id) then
        redis.call('DEL', wake_key(id))
        return held_reply(id)
    end
    return nil
end

-- wait_check id keepalive_ms: keep a place in line alive, report promotion.
local function op_wait_check(id, keepalive)
    local done = left_the_line(id)
    if done then return done end
    local _, maxh = parse_info(redis.call('HGET', K_INFO, id))
    redis.call('ZADD', K_TIMEOUT, 'XX', int(NOW_MS + keepalive), id)
    touch()
    return waiting_reply(id, redis.call('ZSCORE', K_OWNER, id), maxh)
end

-- give_up id: leave the line, unless promotion came just in time.
local function op_give_up(id)
    local done = left_the_line(id)
    if done then return done end
    remove(id)
    promote()
    touch()
    return {'gone'}
end

-- release id: 1 if it was a live holder, 0 otherwise; nothing of it remains.
local function op_release(id)
    expire()
    local held = redis.call('ZSCORE', K_OWNER, id) and
                 not redis.call('ZSCORE', K_WAITING, id)
    remove(id)
    promote()
    touch()
    if held then return 1 end
    return 0
end

-- refresh id lease_ms(0 = as acquired): new lease in ms, or 0 if lost.
local function op_refresh(id, lease)
    housekeeping()
    if not redis.call('ZSCORE', K_OWNER, id) then
        remove(id)
        return 0
    end
    if redis.call('ZSCORE', K_WAITING, id) then
        return 0
    end
    if lease <= 0 then
        lease = parse_info(redis.call('HGET', K_INFO, id)) or 0
        if lease <= 0 then return 0 end
    end
    redis.call('ZADD', K_TIMEOUT, 'XX', int(NOW_MS + lease), id)
    touch()
    return int(lease)
end

-- token id: the holder's ticket, or nil.
local function op_token(id)
    housekeeping()
    if redis.call('ZSCORE', K_WAITING, id) then return false end
    return redis.call('ZSCORE', K_OWNER, id)
end

-- list: every member in line order as {id, ticket, ms left, waiting, info}.
local function op_list()
    housekeeping()
    local all = redis.call('ZRANGE', K_OWNER, 0, -1, 'WITHSCORES')
    local out = {}
    for i = 1, #all, 2 do
        local id = all[i]
        local deadline = redis.call('ZSCORE', K_TIMEOUT, id)
        local left = -1
        if deadline then left = tonumber(deadline) - NOW_MS end
        local waiting = 0
        if redis.call('ZSCORE', K_WAITING, id) then waiting = 1 end
        out[#out + 1] = {id, all[i + 1], int(left), int(waiting),
                         redis.call('HGET', K_INFO, id) or ''}
    end
    return out
end

local op = ARGV[1]
if op == 'acquire' then
    return op_acquire(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]),
                      tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
elseif op == 'wait_check' then
    return op_wait_check(ARGV[2], tonumber(ARGV[3]))
elseif op == 'give_up' then
    return op_give_up(ARGV[2])
elseif op == 'release' then
    return op_release(ARGV[2])
elseif op == 'refresh' then
    return op_refresh(ARGV[2], tonumber(ARGV[3]))
elseif op == 'token' then
    return op_token(ARGV[2])
elseif op == 'list' then
    return op_list()
end
return redis.error_reply('REDSEM unknown operation ' .. tostring(op))
