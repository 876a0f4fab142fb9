# web-puppet: a web node of kv-web, answering from the key-value store (a replica if the cluster has
# one, else the primary); $kv_primary and $kv_replica name those services.
class kvweb::web(String $kv_primary = 'kv-primary-puppet', String $kv_replica = 'kv-replica-puppet') {
  $ips = $weft['service_ips']
  $kv = $ips[$kv_replica] ? {
    undef   => $ips[$kv_primary][0],
    default => $ips[$kv_replica][0],
  }
  $cluster = $weft['cluster']
  $greeting = regsubst($cluster['web']['greeting'], "'", '', 'G')
  kvweb::daemon { 'web':
    port    => $cluster['web']['port'],
    command => "python3 web.py --bind ${weft['node']['ip']} --port ${cluster['web']['port']} --kv http://${kv}:${cluster['kv']['port']} --name ${weft['node']['hostname']} --greeting '${greeting}'",
  }
}
