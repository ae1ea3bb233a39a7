-- bench/loop.lua - loop functions appended to a copy of src/redsem.lua (they
-- see its locals) by bench/lua_loop.sh and bench/instructions.sh: each
-- calls dispatch() directly, many times inside one FCALL, and returns the
-- microseconds per operation it timed with TIME.
--   pairs N HOLDERS TAG      N acquire+release pairs beside HOLDERS holders
--   handoffs N TENANTS TAG   N hand-offs on a line of 200 (limit 4), its
--                            waiters spread over TENANTS tenants (0: none)
local function us(t) return tonumber(t[1]) * 1000000 + tonumber(t[2]) end
local ORIGIN = 'bench.example:5432|4242|db|user|bench'
-- The keys and the acquire's arguments after the origin, as the side's
-- script wants them: the owner key alone and the generation's two
-- arguments first (since the script derives the other keys), or the six
-- keys of a script from before (which knows no generation).
local COMPACT = OPS.acquire.read({'acquire', 'x', '1', '1', '1', '0', '1', 'o', '', '', '', '0', 'ten'}) and
    select(11, OPS.acquire.read({'acquire', 'x', '1', '1', '1', '0', '1', 'o', '', '', '', '0', 'ten'})) == 'ten'
local function keys_of(b)
    if COMPACT then return {b .. 'owner'} end
    return {b .. 'owner', b .. 'timeout', b .. 'ticket', b .. 'info', b .. 'waiting', b .. 'state'}
end
local function tail(t)
    if COMPACT then return '', '', '', '0', t end
    return '', '0', t
end
-- pairs N HOLDERS TAG: N acquire+release pairs beside HOLDERS holders
local function loop_pairs(_, a)
    local n, holders = tonumber(a[1]), tonumber(a[2])
    local K = keys_of('redsem:{p' .. a[3] .. '}:')
    for i = 1, holders do
        dispatch(K, {'acquire', 'h' .. i, '100', '1', '600000', '0', '60000', ORIGIN})
    end
    local t0 = redis.call('TIME')
    for i = 1, n do
        local id = string.format('%016x.%d', i, i)
        dispatch(K, {'acquire', id, '100', '1', '600000', '0', '60000', ORIGIN, tail('')})
        dispatch(K, {'release', id})
    end
    local t1 = redis.call('TIME')
    for i = 1, holders do dispatch(K, {'release', 'h' .. i}) end
    return string.format('%.2f', (us(t1) - us(t0)) / n)
end
-- handoffs N TENANTS TAG: N hand-offs on a line of 200 (limit 4)
local function loop_handoffs(_, a)
    local n, tenants = tonumber(a[1]), tonumber(a[2])
    local b = 'redsem:{h' .. a[3] .. '}:'
    local K = keys_of(b)
    local function tenant(i) return tenants == 0 and '' or 'tenant' .. (i % tenants) end
    local held = {}
    for i = 1, 4 do
        dispatch(K, {'acquire', 'h' .. i, '4', '1', '600000', '0', '60000', ORIGIN})
        held[i] = 'h' .. i
    end
    for i = 1, 200 do
        dispatch(K, {'acquire', 'w' .. i, '4', '1', '600000', '1', '600000', ORIGIN, tail(tenant(i))})
    end
    local spent = 0
    for i = 1, n do
        local t0 = redis.call('TIME')
        dispatch(K, {'acquire', 'n' .. i, '4', '1', '600000', '1', '600000', ORIGIN, tail(tenant(i))})
        dispatch(K, {'release', held[i]})
        local t1 = redis.call('TIME')
        spent = spent + us(t1) - us(t0)
        -- the promoted waiter: the newest ticket (its grant)
        held[i + 4] = redis.call('ZRANGE', K[1], '-1', '-1')[1]
    end
    local left = redis.call('ZRANGE', K[1], '0', '-1')
    for _, id in ipairs(left) do redis.call('DEL', b .. 'wake:' .. id) end
    redis.call('DEL', K[1], K[2], K[3], K[4], K[5], K[6], b .. 'tenant', b .. 'tq')
    for t = 0, tenants - 1 do redis.call('DEL', b .. 'tline:tenant' .. t) end
    redis.call('DEL', b .. 'tline:')
    return string.format('%.2f', spent / n)
end
