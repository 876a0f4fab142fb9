# kv-primary-puppet and kv-replica-puppet: the key-value store of kv-web. weft declares this class
# for every action of the service; a replica gets role => 'replica' and the primary's address.
class kvweb::kv(String $role = 'primary', String $primary = '') {
  $port = $weft['cluster']['kv']['port']
  $follow = $role ? {
    'replica' => " --follow http://${primary}:${port}",
    default   => '',
  }
  kvweb::daemon { 'kv':
    port    => $port,
    command => "python3 kv.py --bind ${weft['node']['ip']} --port ${port} --data data.json${follow}",
  }
}
