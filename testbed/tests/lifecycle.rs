//! The servers' lifecycle end to end: start, attach through the handle file, stop and restart
//! each server, and leave no process and no temp dir behind.

use std::time::Duration;

use testbed::{Options, Services, Target, pid_alive};

#[test]
fn servers_start_restart_and_leave_nothing_behind() {
    let mut services = Services::start(&Options { cluster: Some(testbed::Cluster::MASTERS), browser: false }).unwrap();
    let dir = services.dir().to_owned();
    let cluster = services.cluster.as_ref().unwrap();
    assert!(services.redis.is_up() && cluster.is_ok());
    let pids: Vec<u32> = [services.redis.pid(), services.postgres.pid()]
        .into_iter()
        .chain(cluster.nodes().iter().map(|n| n.pid()))
        .map(|pid| pid.expect("every server runs"))
        .collect();

    // A view read back from the handle file controls the same servers; dropping it stops none.
    let handle = services.handle_file(Target::Cluster).unwrap();
    let view = Services::attach(&handle).unwrap();
    assert_eq!(view.redis_url(), cluster.url());
    assert_eq!(view.postgres.url(), services.postgres.url());
    assert!(view.redis.stop(), "redis-server exits on SIGTERM");
    assert!(!services.redis.is_up() && services.redis.pid().is_none());
    view.redis.start().unwrap();
    assert!(services.redis.is_up());
    assert!(view.postgres.stop(), "postgres exits on a fast shutdown");
    assert!(services.postgres.pid().is_none());
    view.postgres.start().unwrap();
    assert!(services.postgres.pid().is_some());
    let node = &view.cluster.as_ref().unwrap().nodes()[0];
    assert!(node.stop(), "a cluster node exits on SIGTERM");
    node.start().unwrap();
    assert!(cluster.wait_ok(Duration::from_secs(30)), "the cluster recovers");
    drop(view);
    assert!(services.redis.is_up());

    let pids: Vec<u32> =
        pids.into_iter().chain([services.redis.pid().unwrap(), services.postgres.pid().unwrap()]).collect();
    services.stop();
    assert!(pids.iter().all(|&pid| !pid_alive(pid)), "a server still runs");
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
