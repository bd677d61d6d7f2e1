-- Delete a key whatever its state. KEYS: the key's hash, notification,
-- attempts. ARGV: wake channel. Returns false when there was nothing.
if redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) == 0 then
  return false
end
redis.call('PUBLISH', ARGV[1], 'd')
return 1
