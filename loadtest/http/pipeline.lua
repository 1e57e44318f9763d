-- wrk script for loadtest/http/compare.sh: HTTP/1.1 pipelining.
--
--   wrk -t1 -c64 -d10s --latency -s pipeline.lua http://127.0.0.1:PORT/ -- 16
--
-- Every write carries DEPTH (the argument after --, default 16) `GET /`
-- requests in one buffer; wrk then reads DEPTH responses before it writes the
-- next batch, and counts each response as one request. A server that answers
-- everything parsed from one read with one write does far better here than
-- one that writes per request.

local depth = 16
local batch

init = function(args)
   depth = tonumber(args[1]) or depth
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format("GET", "/")
   end
   batch = table.concat(r)
end

request = function()
   return batch
end
