//! The storm generator the scenarios use: `POST /buy` from many users, several tries each, as
//! concurrently as asked, and a report of what the clients saw.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;
use uuid::Uuid;

/// What the clients of a storm saw.
#[derive(Debug, Default)]
pub struct StormReport {
    pub sent: usize,
    pub statuses: BTreeMap<u16, usize>,
    /// Order ids of the 201 answers.
    pub confirmed: BTreeSet<Uuid>,
    /// Requests whose connection was refused (the server was not listening): never sent.
    pub refused: usize,
    /// Requests that got no answer (connection reset, timeout, ...): (user id, error).
    pub interrupted: Vec<(String, String)>,
    /// Bodies of 5xx answers (the first few).
    pub server_error_bodies: Vec<String>,
    /// Every 5xx answer: (user id, body).
    pub server_error_answers: Vec<(String, String)>,
    /// Users whose request was answered 5xx (their purchase may still have happened, e.g. when
    /// Redis ran the script but its answer was lost).
    pub server_error_users: BTreeSet<String>,
    pub elapsed: Duration,
}

impl StormReport {
    pub fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    pub fn server_errors(&self) -> usize {
        self.statuses.iter().filter(|(s, _)| **s >= 500).map(|(_, n)| n).sum()
    }

    /// Statuses outside the purchase outcomes a healthy service gives (201, 409, 410).
    pub fn unexpected_statuses(&self) -> BTreeMap<u16, usize> {
        self.statuses.iter().filter(|(s, _)| ![201, 409, 410].contains(*s)).map(|(s, n)| (*s, *n)).collect()
    }

    pub fn merge(&mut self, other: StormReport) {
        self.sent += other.sent;
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        self.confirmed.extend(other.confirmed);
        self.refused += other.refused;
        self.interrupted.extend(other.interrupted);
        self.server_error_bodies.extend(other.server_error_bodies);
        self.server_error_answers.extend(other.server_error_answers);
        self.server_error_users.extend(other.server_error_users);
        self.elapsed += other.elapsed;
    }
}

enum Outcome {
    Answer { status: u16, order_id: Option<Uuid>, body: Option<String>, user: String },
    Refused,
    Interrupted { user: String, why: String },
}

/// `requests` purchases of one sale by `users` distinct users (`<prefix>-<n>`, request i by user
/// i mod users, so every user tries requests / users times), at most `concurrency` at once. With
/// [`Storm::with_jwt`], each user sends its own bearer token (signed before the storm) and no
/// `user_id`.
pub struct Storm {
    pub address: String,
    pub sale: String,
    pub user_prefix: String,
    pub users: usize,
    pub requests: usize,
    pub concurrency: usize,
    /// Counts 201 answers while the storm runs, for tests that strike mid-storm.
    pub created: Arc<AtomicUsize>,
    /// The HS256 secret of a `SECKILL_AUTH=jwt` service.
    pub jwt_secret: Option<String>,
}

impl Storm {
    pub fn new(address: &str, sale: &str, users: usize, requests: usize) -> Self {
        Self {
            address: address.to_owned(),
            sale: sale.to_owned(),
            user_prefix: "user".into(),
            users,
            requests,
            concurrency: 64,
            created: Arc::default(),
            jwt_secret: None,
        }
    }

    /// Each user buys with a token signed with `secret` (`Some`), or names itself in the body.
    pub fn with_jwt(mut self, secret: Option<&str>) -> Self {
        self.jwt_secret = secret.map(str::to_owned);
        self
    }

    /// The users' tokens, by user number (none without a secret).
    fn tokens(&self) -> Vec<String> {
        let Some(secret) = &self.jwt_secret else { return vec![] };
        let secret = secrecy::SecretString::from(secret.clone());
        (0..self.users)
            .map(|n| {
                let user = seckill::domain::UserId::parse(&format!("{}-{n}", self.user_prefix)).unwrap();
                seckill::identity::sign_hs256(&secret, &user, "sub", Duration::from_secs(3600), None, None).unwrap()
            })
            .collect()
    }

    pub fn users_named(mut self, prefix: &str) -> Self {
        self.user_prefix = prefix.into();
        self
    }

    /// Waits until at least `n` purchases succeeded.
    pub async fn wait_for_created(&self, n: usize) {
        let until = Instant::now() + Duration::from_secs(60);
        while self.created.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < until, "the storm never reached {n} purchases");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Runs the storm in a task of its own; the returned handle watches its progress.
    pub fn spawn(self) -> (Arc<Storm>, tokio::task::JoinHandle<StormReport>) {
        let storm = Arc::new(self);
        let running = tokio::spawn({
            let storm = storm.clone();
            async move { storm.run().await }
        });
        (storm, running)
    }

    pub async fn run(&self) -> StormReport {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(self.concurrency)
            .timeout(Duration::from_secs(15))
            .pool_idle_timeout(Duration::from_secs(2)) // inside the server's keep-alive, as common::http_client
            .build()
            .unwrap();
        let url = format!("{}/buy", self.address);
        let tokens = self.tokens();
        let started = Instant::now();
        let outcomes: Vec<Outcome> = futures::stream::iter(0..self.requests)
            .map(|i| {
                let user = format!("{}-{}", self.user_prefix, i % self.users);
                let request = match tokens.get(i % self.users) {
                    Some(token) => client.post(&url).bearer_auth(token).json(&json!({"sale_id": self.sale})),
                    None => client.post(&url).json(&json!({"sale_id": self.sale, "user_id": user})),
                };
                let request = request.send();
                async move {
                    match request.await {
                        Ok(response) => {
                            let status = response.status().as_u16();
                            let text = response.text().await.unwrap_or_default();
                            let order_id = (status == 201).then(|| {
                                self.created.fetch_add(1, Ordering::Relaxed);
                                let body: serde_json::Value = serde_json::from_str(&text).expect("201 body is JSON");
                                body["order_id"].as_str().expect("201 has an order id").parse().unwrap()
                            });
                            Outcome::Answer { status, order_id, body: (status >= 500).then_some(text), user }
                        }
                        Err(err) if err.is_connect() => Outcome::Refused,
                        Err(err) => Outcome::Interrupted { user, why: format!("{err:?}") },
                    }
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let mut report = StormReport { sent: self.requests, elapsed: started.elapsed(), ..Default::default() };
        for outcome in outcomes {
            match outcome {
                Outcome::Answer { status, order_id, body, user } => {
                    *report.statuses.entry(status).or_default() += 1;
                    report.confirmed.extend(order_id);
                    if let Some(body) = body {
                        if report.server_error_bodies.len() < 5 {
                            report.server_error_bodies.push(body.clone());
                        }
                        report.server_error_answers.push((user.clone(), body));
                        report.server_error_users.insert(user);
                    }
                }
                Outcome::Refused => report.refused += 1,
                Outcome::Interrupted { user, why } => report.interrupted.push((user, why)),
            }
        }
        report
    }
}
