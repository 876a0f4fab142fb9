# One daemon of kv-web, driven by the action weft runs ($weft['action']): configure installs the
# program and writes run.sh (and $files), restarting the daemon if it runs and run.sh changed;
# start runs run.sh in a session of its own unless it runs and waits for $port; stop kills it and
# waits until it is gone; remove deletes it all.
define kvweb::daemon(String $port, String $command, Hash[String, String] $files = {}) {
  $dir = "/var/lib/weft/${weft['service']}"
  case $weft['action'] {
    'configure': {
      file { $dir: ensure => directory, mode => '0755' }
      file { "${dir}/${title}.py":
        source => "puppet:///modules/kvweb/${title}.py",
        mode   => '0644',
      }
      file { "${dir}/run.sh":
        content => "exec ${command}\n",
        mode    => '0644',
        notify  => Exec["restart ${title}"],
      }
      # A new command restarts a daemon that runs (a reconfigure); one that does not is left to start.
      exec { "restart ${title}":
        command     => 'pid=$(cat daemon.pid); kill $pid; i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; setsid nohup sh ./run.sh >daemon.log 2>&1 </dev/null & echo $! >daemon.pid',
        onlyif      => 'test -f daemon.pid && kill -0 "$(cat daemon.pid)"',
        cwd         => $dir,
        provider    => shell,
        refreshonly => true,
      }
      $files.each |$name, $content| {
        file { "${dir}/${name}": content => $content, mode => '0644' }
      }
    }
    'start': {
      exec { "start ${title}":
        command  => 'setsid nohup sh ./run.sh >daemon.log 2>&1 </dev/null & echo $! >daemon.pid',
        unless   => 'test -f daemon.pid && kill -0 "$(cat daemon.pid)"',
        cwd      => $dir,
        provider => shell,
      }
      -> exec { "wait for ${title}":
        command  => "python3 -c 'import socket,sys,time\nfor _ in range(150):\n  try: socket.create_connection((sys.argv[1], int(sys.argv[2])), 1); sys.exit(0)\n  except OSError: time.sleep(0.1)\nsys.exit(1)' ${weft['node']['ip']} ${port}",
        unless   => "python3 -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)' ${weft['node']['ip']} ${port}",
        provider => shell,
      }
    }
    'stop': {
      exec { "stop ${title}":
        command  => "pid=\$(cat ${dir}/daemon.pid); kill \$pid 2>/dev/null; i=0; while kill -0 \$pid 2>/dev/null && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done; rm -f ${dir}/daemon.pid",
        onlyif   => "test -f ${dir}/daemon.pid",
        provider => shell,
      }
    }
    'remove': {
      file { $dir: ensure => absent, force => true, recurse => true }
    }
    default: {}
  }
}
