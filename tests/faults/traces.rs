//! Traces (issue 28): the service exports to a real OTLP/HTTP receiver started here (protobuf,
//! decoded with `opentelemetry-proto`). One purchase is one trace: the request span continues the
//! client's `traceparent`, the Redis call is its child with the script's outcome, and the
//! worker's batch span is linked to that call (through the `traceparent` in the stream entry)
//! with the Postgres insert inside it; the order lookup is a trace of its own. With sampling at 0
//! nothing is exported. On one Redis and on the Cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::common;
use crate::harness::Deployment;

/// What the receiver got: every span, with its resource's `service.name`, and every request
/// that was not an OTLP protobuf export (the receiver's task cannot fail the test itself).
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(String, Span)>>>, Arc<Mutex<Vec<String>>>);

impl Received {
    /// The spans received; fails the test if a request was not an OTLP protobuf export.
    fn spans(&self) -> Vec<(String, Span)> {
        let unexpected = self.1.lock().unwrap().clone();
        assert!(unexpected.is_empty(), "the receiver got requests that were not OTLP exports: {unexpected:?}");
        self.0.lock().unwrap().clone()
    }
}

/// An OTLP/HTTP trace receiver on a free loopback port: answers every `POST /v1/traces` with
/// 200 and an empty protobuf body, keeping the decoded spans. Returns its endpoint.
async fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let received = Received::default();
    let kept = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                // HTTP/1.1 with keep-alive: one request after another on the connection.
                loop {
                    let mut head = Vec::new();
                    loop {
                        let mut line = String::new();
                        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push(line);
                    }
                    let length: usize = head
                        .iter()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; length];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let request = match ExportTraceServiceRequest::decode(&body[..]) {
                        Ok(request) if head[0].starts_with("POST /v1/traces ") => request,
                        decoded => {
                            let why = decoded.err().map(|e| e.to_string()).unwrap_or_default();
                            kept.1.lock().unwrap().push(format!("{} {why}", head[0].trim()));
                            return;
                        }
                    };
                    for resource in request.resource_spans {
                        let service = resource
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|a| a.key == "service.name")
                            .and_then(|a| a.value.as_ref())
                            .map(|v| format!("{:?}", v.value))
                            .unwrap_or_default();
                        for scope in resource.scope_spans {
                            kept.0.lock().unwrap().extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
                        }
                    }
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    stream.get_mut().write_all(answer.as_bytes()).await.unwrap();
                }
            });
        }
    });
    (endpoint, received)
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span.attributes.iter().find(|a| a.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        other => format!("{other:?}"),
    })
}

fn named<'a>(spans: &'a [(String, Span)], name: &str) -> Vec<&'a Span> {
    spans.iter().map(|(_, s)| s).filter(|s| s.name == name).collect()
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const LOOKUP_TRACE: &str = "5c0a3f3577b34da6a3ce929d0e0e4737";

async fn one_purchase_is_one_trace(redis_url: &str) {
    let (endpoint, received) = receiver().await;
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "seckill-trace-test"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut deployment = Deployment::on_redis(redis_url, &otel).await;
    let (mut service, sale) = deployment.start_with_sale(10).await;

    let bought = deployment
        .client
        .post(deployment.url("/buy"))
        .header("traceparent", format!("00-{TRACE}-{PARENT}-01"))
        .json(&serde_json::json!({"sale_id": sale, "user_id": "alice"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bought.status(), 201);
    let order_id = bought.json::<serde_json::Value>().await.unwrap()["order_id"].as_str().unwrap().to_owned();
    deployment.wait_for_drain(&sale).await;
    let looked = deployment
        .client
        .get(deployment.url(&format!("/sales/{sale}/order?user_id=alice")))
        .header("traceparent", format!("00-{LOOKUP_TRACE}-{PARENT}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(looked.status(), 200);
    // SIGTERM: the ordered shutdown, then the last spans are exported before the exit.
    service.terminate();
    assert!(service.wait(Duration::from_secs(30)).await.success());

    let spans = received.spans();
    assert!(spans.iter().all(|(service, _)| service.contains("seckill-trace-test")), "service.name");
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let in_trace =
        |trace: &str| -> Vec<&Span> { spans.iter().map(|(_, s)| s).filter(|s| hex(&s.trace_id) == trace).collect() };

    // The request continues the client's trace, under the client's span.
    let purchase = in_trace(TRACE);
    let request =
        purchase.iter().find(|s| s.name == "POST /buy").unwrap_or_else(|| panic!("no request span: {purchase:#?}"));
    assert_eq!((hex(&request.parent_span_id), request.kind), (PARENT.to_owned(), SpanKind::Server as i32));
    assert_eq!(attribute(request, "http.response.status_code").as_deref(), Some("201"));
    assert_eq!(attribute(request, "http.route").as_deref(), Some("/buy"));
    // The Redis call, inside it, with the script's outcome.
    let call = purchase.iter().find(|s| s.name == "redis.buy").expect("the Redis call's span");
    assert_eq!((hex(&call.parent_span_id), call.kind), (hex(&request.span_id), SpanKind::Client as i32));
    assert_eq!(attribute(call, "seckill.outcome").as_deref(), Some("ok"));
    assert_eq!(attribute(call, "seckill.sale_id").as_deref(), Some(sale.as_str()));

    // The worker's batch: linked to that call through the stream entry; the insert inside it.
    let batches: Vec<&Span> = named(&spans, "worker.batch")
        .into_iter()
        .filter(|b| b.links.iter().any(|l| hex(&l.trace_id) == TRACE && l.span_id == call.span_id))
        .collect();
    assert_eq!(batches.len(), 1, "one batch wrote alice's order: {:#?}", named(&spans, "worker.batch"));
    let batch = batches[0];
    assert_eq!(batch.kind, SpanKind::Consumer as i32);
    let inserts: Vec<&Span> =
        named(&spans, "postgres.insert").into_iter().filter(|i| i.parent_span_id == batch.span_id).collect();
    assert_eq!(inserts.len(), 1, "the batch's insert");
    assert_eq!((inserts[0].trace_id.clone(), inserts[0].kind), (batch.trace_id.clone(), SpanKind::Client as i32));
    assert_eq!(attribute(inserts[0], "db.system.name").as_deref(), Some("postgresql"));
    let stored: uuid::Uuid = sqlx::query_scalar("select order_id from orders where sale_id = $1 and user_id = 'alice'")
        .bind(&sale)
        .fetch_one(&deployment.pool)
        .await
        .unwrap();
    assert_eq!(stored.to_string(), order_id);

    // The order lookup: its request span and its reads, in the client's second trace.
    let lookup = in_trace(LOOKUP_TRACE);
    let request = lookup.iter().find(|s| s.name == "GET /sales/{sale_id}/order").expect("the lookup's request span");
    assert_eq!(attribute(request, "http.response.status_code").as_deref(), Some("200"));
    let reads: Vec<&&Span> = lookup.iter().filter(|s| s.name == "order.lookup").collect();
    assert!(!reads.is_empty() && reads.iter().all(|r| r.parent_span_id == request.span_id), "{lookup:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_purchase_is_one_trace_from_the_request_to_the_postgres_insert() {
    one_purchase_is_one_trace(&common::redis_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_purchase_is_one_trace_on_the_redis_cluster() {
    one_purchase_is_one_trace(&common::cluster().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sampling_at_zero_nothing_is_exported() {
    let (endpoint, received) = receiver().await;
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut deployment = Deployment::new(&otel).await;
    let (mut service, sale) = deployment.start_with_sale(10).await;
    for user in ["alice", "bob"] {
        let bought = deployment
            .client
            .post(deployment.url("/buy"))
            .header("traceparent", format!("00-{TRACE}-{PARENT}-01"))
            .json(&serde_json::json!({"sale_id": sale, "user_id": user}))
            .send()
            .await
            .unwrap();
        assert_eq!(bought.status(), 201);
    }
    deployment.wait_for_drain(&sale).await;
    service.terminate();
    assert!(service.wait(Duration::from_secs(30)).await.success());
    let spans = received.spans();
    assert!(
        spans.is_empty(),
        "{} spans exported at sampling 0: {:?}",
        spans.len(),
        spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>()
    );
    // The same deployment with sampling on exports: the receiver and the setting work.
    let sampled = [("OTEL_TRACES_SAMPLER", "always_on")];
    let mut again = deployment.start_with(&sampled).await;
    let bought = deployment.buy(&sale, "carol").await;
    assert_eq!(bought.status(), 201);
    again.terminate();
    assert!(again.wait(Duration::from_secs(30)).await.success());
    assert!(!named(&received.spans(), "POST /buy").is_empty(), "the control run exported its request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_event_and_an_expiry_are_traces_too() {
    let (endpoint, received) = receiver().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("SECKILL_PAYMENT_SECRET", common::PAYMENT_SECRET),
    ];
    let mut deployment = Deployment::new(&env).await;
    let mut service = deployment.start().await;
    let sale = common::new_sale_id();
    // A window no loaded host outlasts before alice pays; bob's expiry is brought forward in
    // Postgres after it, where the sweeper finds due reservations.
    let seeded = deployment.seed(&sale, serde_json::json!({"stock": 2, "payment_window": "1h"})).await;
    assert_eq!(seeded.status(), 200);
    // alice pays in time; bob lets his reservation expire (the sweeper releases his unit).
    let mut orders = HashMap::new();
    for user in ["alice", "bob"] {
        let bought = deployment.buy(&sale, user).await;
        assert_eq!(bought.status(), 201);
        orders.insert(user, bought.json::<serde_json::Value>().await.unwrap()["order_id"].as_str().unwrap().to_owned());
    }
    deployment.wait_for_drain(&sale).await;
    let paid = deployment.pay(&sale, &orders["alice"], "evt-trace-1").await;
    assert_eq!(paid.status(), 200);
    sqlx::query("update orders set pay_by = now() where order_id = $1::uuid")
        .bind(&orders["bob"])
        .execute(&deployment.pool)
        .await
        .unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while deployment
        .store
        .sale_state(&seckill::domain::SaleId::parse(&sale).unwrap())
        .await
        .unwrap()
        .unwrap()
        .stock_left
        != 1
    {
        assert!(tokio::time::Instant::now() < until, "bob's unit never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    service.terminate();
    assert!(service.wait(Duration::from_secs(30)).await.success());

    let spans = received.spans();
    let event = named(&spans, "POST /payments/events");
    assert_eq!(event.len(), 1, "the payment event's request");
    let pay = named(&spans, "reservation.pay");
    assert_eq!(pay.len(), 1);
    assert_eq!((&pay[0].trace_id, &pay[0].parent_span_id), (&event[0].trace_id, &event[0].span_id));
    assert_eq!(attribute(pay[0], "seckill.outcome").as_deref(), Some("paid"));
    assert_eq!(attribute(pay[0], "seckill.order_id").as_deref(), Some(orders["alice"].as_str()));
    let expiries = named(&spans, "reservations.expire");
    assert!(
        expiries.iter().any(|e| attribute(e, "seckill.expired").as_deref() == Some("1")),
        "the sweeper's round that expired bob's reservation: {expiries:#?}"
    );
}
