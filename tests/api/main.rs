//! Integration tests against real Redis and Postgres (started by `cargo xtask test`).

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod admission;
mod batch;
mod browser;
mod buy;
mod buyer_page;
mod buyer_view;
mod challenge;
mod challenge_page;
mod chromium;
mod client_limits;
mod concurrency;
mod controls;
mod controls_model;
mod controls_service_model;
mod docs;
mod drop_model;
mod examples;
mod health;
mod helpers;
mod identity;
mod isolation;
mod limiters;
mod lua_examples;
mod metrics;
mod openapi;
mod order_entries;
mod quantities;
mod rate_limit;
mod readme;
mod reconcile;
mod redis_loss;
mod reservations;
mod retire;
mod sales_overview;
mod script_cache;
mod shards;
mod shutdown;
mod sold_out;
mod waiting_room_page;
mod webhook_endpoints;
mod webhooks;
mod worker;
