//! `SECKILL_HTTP_WORKERS` sets the HTTP worker threads of `seckill serve` (issue 29): counted in
//! the running process as its actix-server worker threads.

use std::time::Duration;

use crate::harness::Deployment;

/// The process's threads whose name starts like actix-server's workers ("actix-server worker N",
/// cut to the kernel's 15 characters).
fn http_worker_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
        .filter(|name| name.starts_with("actix-server wo"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_worker_count_is_the_setting_and_by_default_the_cpus_the_process_may_use() {
    let mut deployment = Deployment::new(&[]).await;
    for workers in [1, 3] {
        let mut service = deployment.start_with(&[("SECKILL_HTTP_WORKERS", &workers.to_string())]).await;
        assert_eq!(http_worker_threads(service.pid()), workers, "SECKILL_HTTP_WORKERS={workers}");
        service.terminate();
        assert!(service.wait(Duration::from_secs(30)).await.success());
    }
    let mut service = deployment.start().await;
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(http_worker_threads(service.pid()), cpus, "unset: the CPUs this process may use");
    service.terminate();
    assert!(service.wait(Duration::from_secs(30)).await.success());
}
