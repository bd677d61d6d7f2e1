-- Delete a key whatever its state. KEYS[1]: the key's hash. ARGV: wake channel.
-- Returns false when there was nothing.
if redis.call('DEL', KEYS[1]) == 0 then
  return false
end
redis.call('PUBLISH', ARGV[1], 'd')
return 1
