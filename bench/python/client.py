"""Load for bench/python/server.py: argv[1] port, argv[2] requests per connection, argv[3]
connections (threads). Prints the requests done."""
import http.client
import sys
import threading

port, n, conns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
done = [0] * conns


def run(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(n):
        c.request("GET", "/item/%d" % i)
        r = c.getresponse()
        r.read()
        assert r.status == 200
        done[k] += 1


ts = [threading.Thread(target=run, args=(k,)) for k in range(conns)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(sum(done))
