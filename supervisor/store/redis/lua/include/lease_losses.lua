-- The lease-loss decisions of core/lease_losses.py and core/failover.py, in Lua for the
-- claim; tests/store/test_redis_decisions.py runs one table of cases through both forms.
-- Times are in any one unit (the claim's are store milliseconds).
-- Input: plain numbers (or nil); a window or a gap is {start =, finish =}.

-- failing_window: the window a claim sent with `since` and run at `now` witnessed.
local function failing_window(since, now, min_span)
  if since == nil or now - since < min_span then
    return nil
  end
  return {start = since, finish = now}
end

-- loss_counts: not if the lease ended inside the window; an unknown end counts.
local function loss_counts(lease_end, window)
  if window == nil or lease_end == nil then
    return true
  end
  return lease_end < window.start or lease_end > window.finish
end

-- judged_later: left for a claim that witnessed the gap in which the lease may have ended.
local function judged_later(lease_end, window, gap, now, lease_ttl, defer)
  if gap == nil or lease_end == nil or now - math.max(gap.finish, lease_end) >= defer then
    return false
  end
  return loss_counts(lease_end, window) and gap.start <= lease_end
         and lease_end <= gap.finish + lease_ttl
end

-- ended_by_failover: a lease that ran out before the hold after a master change ended.
local function ended_by_failover(lease_end, hold_until)
  return lease_end ~= nil and hold_until ~= nil and lease_end <= hold_until
end

-- claim_note_due: whether a claim writes itself down as the pool's last.
local function claim_note_due(last_claim, now, gap, every)
  return gap ~= nil or last_claim == nil or not (0 <= now - last_claim and now - last_claim < every)
end
