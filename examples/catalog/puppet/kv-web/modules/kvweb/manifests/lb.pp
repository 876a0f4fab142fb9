# lb-puppet: the round-robin balancer of kv-web over the web nodes (lb.backends in the cluster
# config). lb.conf is re-read by the balancer when it changes: an expand needs no restart.
class kvweb::lb {
  $lb = $weft['cluster']['lb']
  $dir = "/var/lib/weft/${weft['service']}"
  kvweb::daemon { 'lb':
    port    => $lb['port'],
    command => "python3 lb.py --bind ${weft['node']['ip']} --port ${lb['port']} --conf ${dir}/lb.conf",
    files   => { 'lb.conf' => "backends=${lb['backends']}\n" },
  }
}
