//! seckill: a flash-sale purchase service.
//!
//! `POST /buy` -> per-client and per-buyer rate limiters (Lua, five algorithms) -> one atomic purchase script (Lua)
//! that
//! checks the sale, refuses a second purchase by the same user, refuses at zero stock, and
//! otherwise records the buyer, decrements stock and appends the order to the sale's Redis stream.
//! The worker copies orders from the streams into Postgres and acknowledges them after commit.
//!
//! # Layout
//!
//! The modules stand in layers, lowest first. A module may import from its own layer and from the
//! layers below it, never from a layer above; the modules of one layer must not import each other
//! in a circle; only `http` and the layers above it use actix-web. `tests/layers.rs` reads this
//! list and checks every `crate::` path in `src/` against it, so a new module needs its line here.
//!
//! 1. Domain
//!    - [`domain`]: the validated ids (`SaleId`, a group's sale `<group>.<name>`; `UserId`) and
//!      the `Order` a purchase makes.
//! 2. Observability
//!    - [`telemetry`]: logging to stderr, as text or JSON lines; OpenTelemetry traces over OTLP
//!      when an endpoint is configured (`traces`).
//!    - [`metrics`]: the Prometheus registry of one process (its HTTP middleware is in `http`).
//! 3. Storage access
//!    - [`redis`]: one server or a cluster (`connection`; the shared and per-HTTP-worker connections in
//!      `connection::shared`), the dedicated connections of purchases
//!      that wait for replicas (`confirm`), every key name (`keys`), the Lua scripts (`lua`), an
//!      order stream's entry fields and consumer group (`order_stream`), the removal of a sale's
//!      keys in pages (`removal`), and `Keyspace`, one
//!      deployment's keys and the shared connection.
//!    - [`db`]: the Postgres pool and migrations, the `orders` and `sales` tables, the order
//!      events' outbox that their writers fill for every registered endpoint (`outbox`).
//! 4. Limiting and selling
//!    - [`identity`]: who is buying: the bearer JWT's verification (built once) and HS256 signing.
//!    - [`operators`]: who operates: the admin credentials, each naming its holder and role
//!      (`viewer`, `operator`), kept as the SHA-256 of random tokens and checked in constant time;
//!      the shared admin token an unnamed operator.
//!    - [`challenge`]: the proof of work at the door: ALTCHA challenges signed for a sale, a buyer
//!      and an address, priced by the address's challenges in the last minute (`curve`,
//!      `lua/challenge_count.lua`), their solutions checked in process and spent once.
//!    - [`limiter`]: the limiting algorithms (`algorithm`), their policy, decisions and header
//!      fields, the client's limiting key (`client_key`: IPv6 grouped by prefix), the clients and
//!      buyers refused lately (`memory`), the in-process limit on sold-out answers (`local`).
//!    - [`purchase`]: seeding and buying (`lua/buy.lua` decrements the stock by the quantity,
//!      keeps each buyer within its `per_buyer` in the sale or its group, enqueues the order and
//!      keeps the buyer's receipt), the registries a seed writes first and takes back when
//!      refused (`registry`), a sale's state, a buyer's receipt (`receipt`), the public
//!      snapshots (`board`), sharded stock (`shards`), the sold-out flags (`sold_out`), the events
//!      channel that tells every instance to drop them (`events`), purchases
//!      that queue up for a shard sent together in one call (`batch`, `lua/buy_batch.lua`).
//! 5. Orders
//!    - [`orders`]: the queue's reads and re-enqueues (`queue`), the worker that copies the
//!      orders from the streams into Postgres (`worker`), and one buyer's order (`lookup`).
//!    - [`admission`]: waiting rooms: a line, a queued sale's or a drop's for all its sizes
//!      (`LineId`; `lua/queue_join.lua`, `lua/admit.lua`), where a buyer stands in it (`line`), its
//!      signed tickets and admission tokens, a drop's buying any of its sizes (`token`).
//!    - [`reservations`]: payment windows: a reservation's transitions in Postgres (`store`),
//!      the release of its unit (`lua/release.lua`), the sweeper that expires them on time and
//!      re-drives owed releases (`sweeper`), the payment events' signature (`signature`), an
//!      operator's cancel of a reservation and refund of a paid order (`actions`).
//!    - [`webhooks`]: order events out: the endpoints, data in Postgres every instance reads
//!      (`endpoints`: registered, removed, disabled after failing too long, re-enabled); the
//!      dispatcher that keeps a sender per enabled endpoint (`dispatcher`), each with its own claims
//!      and concurrency, posting the outbox's events at least once and one order's in order
//!      (`sender`); their Standard Webhooks signatures (`signature`), the outbox's reads, claims
//!      and retries (`store`).
//!    - [`exports`]: orders out: a sale's or a drop's orders as CSV or NDJSON, read a page at a
//!      time in key order (`pages`), so memory is bounded whatever the count (`format`: a line).
//!    - [`controls`]: sale-day controls, their Redis side: the kill switch (pause, resume, end now:
//!      `lua/control.lua`, read by the purchase script in its own call) and stock on the fly
//!      (`lua/restock.lua`); the operators' audit trail in Postgres (`audit`).
//!    - [`draw`]: a drop's raffle anyone can verify: its entries (`entries`: a buyer's one entry,
//!      `lua/draw_enter.lua`, its stream the worker copies to Postgres once, the `draws` row); pure:
//!      ranking, allocation, waitlist rule, the published record and its check (docs/draw.md); the
//!      run (`run`: close, drain, results once in `draw_results`, the waitlist put in Redis, the
//!      winners' reservations by `lua/draw_award.lua`, reveal; the record a page at a time; the
//!      automatic runner); the units that come back offered to the waitlist first (`offers`,
//!      `lua/draw_release.lua`, called by `reservations`' release).
//!    - [`drops`]: a drop, a product whose sizes are the sales of one group, its Redis side: its
//!      seed over every size and its line in one call (`lua/drop_seed.lua`), its one switch and its
//!      stock (`lua/drop_control.lua`, `lua/drop_restock.lua`), its sizes, its Postgres row (`store`).
//! 6. Reconciliation
//!    - [`reconcile`]: whether a sale's Redis buyers and Postgres orders agree, and the repair (the
//!      shards Redis kept of a sharded sale whose shard 0 it lost: `kept`).
//!    - [`retire`]: retiring a sale that is over (its Redis keys go, Postgres keeps its orders),
//!      by hand or by the janitor.
//! 7. Use cases
//!    - [`shop`]: the sale's use cases, one method of `Shop` each (buy, read a sale, read and cancel
//!      an order, join and ask a waiting room, take a payment event, an operator's cancel and
//!      refund of an order (`order_actions`), seed, watch, retire,
//!      reconcile, pause, resume, end, change the stock, list the audit trail (`controls`), seed,
//!      read, switch and restock a drop whole (`drops`), list
//!      and re-send the order events (`events`), list, register, remove and re-enable the webhook
//!      endpoints (`webhooks`), export a sale's or a drop's orders (`exports`), readiness), each
//!      returning a typed outcome or the use cases' `Error`; the rate limits a buyer's request
//!      passes and the decision it reports (`limits`).
//! 8. HTTP
//!    - [`http`]: the routes (each extracts, calls one use case, maps its outcome), `AppState`, the
//!      API error and its status codes, the middleware, the client's address behind proxies, who is
//!      buying (`buyer`), the `RateLimit` fields, the edge (`edge`: the connection budget and each
//!      client's share, what a connection may hold before a handler runs).
//! 9. Application
//!    - [`config`]: the command line and every setting, with its default.
//!    - [`app`]: builds and runs the service with its ordered shutdown (the server assembled
//!      behind the edge in `server`, its connection budget from `nofile` in `descriptors`); the
//!      other commands.

pub mod admission;
pub mod app;
pub mod challenge;
pub mod config;
pub mod controls;
pub mod db;
pub mod domain;
pub mod draw;
pub mod drops;
pub mod exports;
pub mod http;
pub mod identity;
pub mod limiter;
pub mod metrics;
pub mod operators;
pub mod orders;
pub mod purchase;
pub mod reconcile;
pub mod redis;
pub mod reservations;
pub mod retire;
pub mod shop;
pub mod telemetry;
pub mod webhooks;
