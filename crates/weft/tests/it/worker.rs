//! A scripted provisioner for tests: worker tasks that take and finish tasks over the provisioner
//! API (HTTP), succeeding at every task (CONFIRM reports IP addresses). Workers survive a server
//! that dies and comes back: a request that fails to connect or loses its answer is retried (a
//! lost take answer leaves a task leased to nobody who knows it; the janitor re-queues it once the
//! lease runs out). Every finish answered 200 is recorded, so a test can check that each task was
//! completed exactly once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

/// Where workers connect and as whom.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `http://host:port` of the internal (provisioner) port.
    pub internal: String,
    pub provisioner: String,
    pub tenant_id: String,
}

/// What the workers saw.
#[derive(Debug, Default)]
pub(crate) struct Record {
    /// Task ids whose successful finish was answered 200, in order (a repeated id is a bug).
    pub completed: Mutex<Vec<String>>,
    /// Task ids handed to a worker, in order (the same id twice means it was re-leased).
    pub taken: Mutex<Vec<String>>,
    /// Finishes answered with something other than 200: (task id, status).
    pub refused: Mutex<Vec<(String, u16)>>,
    /// Requests that got no answer (connection refused, reset, timed out).
    pub errors: Mutex<u64>,
}

impl Record {
    pub(crate) fn completed(&self) -> Vec<String> {
        self.completed.lock().unwrap().clone()
    }

    pub(crate) fn completed_count(&self) -> usize {
        self.completed.lock().unwrap().len()
    }

    /// Ids completed more than once, with their counts.
    pub(crate) fn duplicates(&self) -> BTreeMap<String, usize> {
        let mut n: BTreeMap<String, usize> = BTreeMap::new();
        for id in self.completed() {
            *n.entry(id).or_default() += 1;
        }
        n.retain(|_, c| *c > 1);
        n
    }
}

/// A pool of workers running until [`Pool::stop`].
pub(crate) struct Pool {
    pub record: Arc<Record>,
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Pool {
    /// Starts `n` workers named `w0`..`w{n-1}`.
    pub(crate) fn start(target: &Target, n: usize) -> Pool {
        let record = Arc::new(Record::default());
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..n)
            .map(|i| {
                let w = Worker::new(target.clone(), format!("w{i}"));
                let (record, stop) = (record.clone(), stop.clone());
                tokio::spawn(async move { w.run(&record, &stop).await })
            })
            .collect();
        Pool {
            record,
            stop,
            handles,
        }
    }

    pub(crate) async fn stop(self) -> Arc<Record> {
        self.stop.store(true, Ordering::SeqCst);
        for h in self.handles {
            h.await.expect("worker panicked");
        }
        self.record
    }
}

/// One worker.
pub(crate) struct Worker {
    target: Target,
    name: String,
    client: reqwest::Client,
}

/// Pause between polls of an empty queue or after a failed connection.
const IDLE: Duration = Duration::from_millis(20);

impl Worker {
    pub(crate) fn new(target: Target, name: String) -> Worker {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("http client");
        Worker {
            target,
            name,
            client,
        }
    }

    fn ids(&self) -> Value {
        json!({"workerId": self.name, "provisionerId": self.target.provisioner,
               "tenantId": self.target.tenant_id})
    }

    /// One take: `Ok(Some(task))`, `Ok(None)` (nothing queued), or `Err` (no answer).
    pub(crate) async fn take(&self) -> Result<Option<Value>, String> {
        let url = format!("{}/v2/tasks/take", self.target.internal);
        let r = self
            .client
            .post(url)
            .body(self.ids().to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let text = r.text().await.map_err(|e| e.to_string())?;
        match status {
            204 => Ok(None),
            200 => Ok(Some(serde_json::from_str(&text).expect("task JSON"))),
            other => panic!("take answered {other}: {text}"),
        }
    }

    /// Finishes `task` successfully, retrying until an answer arrives; returns its status.
    pub(crate) async fn finish(&self, task: &Value, record: &Record) -> u16 {
        let mut body = self.ids();
        body["taskId"] = task["taskId"].clone();
        body["status"] = json!(0);
        body["stdout"] = json!("ok");
        if task["taskName"] == "CONFIRM" {
            let n = task["config"]["nodenum"].as_u64().unwrap_or(0);
            let ip = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
            body["ipaddresses"] = json!({"access_v4": ip, "bind_v4": ip});
        }
        let url = format!("{}/v2/tasks/finish", self.target.internal);
        loop {
            match self.client.post(&url).body(body.to_string()).send().await {
                Ok(r) => return r.status().as_u16(),
                Err(_) => {
                    *record.errors.lock().unwrap() += 1;
                    tokio::time::sleep(IDLE).await;
                }
            }
        }
    }

    async fn run(&self, record: &Record, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            let task = match self.take().await {
                Ok(Some(t)) => t,
                Ok(None) => {
                    tokio::time::sleep(IDLE).await;
                    continue;
                }
                Err(_) => {
                    *record.errors.lock().unwrap() += 1;
                    tokio::time::sleep(IDLE).await;
                    continue;
                }
            };
            let id = task["taskId"].as_str().expect("taskId").to_string();
            record.taken.lock().unwrap().push(id.clone());
            match self.finish(&task, record).await {
                200 => record.completed.lock().unwrap().push(id),
                other => record.refused.lock().unwrap().push((id, other)),
            }
        }
    }
}
