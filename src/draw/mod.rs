//! The draw (issue 53): a drop seeded in draw mode takes entries for a window instead of selling
//! first come, first served, then ranks them from a secret seed whose commitment was public before
//! the window opened. The entries side (`entries`): a buyer's one entry, in one Redis call
//! (`lua/draw_enter.lua`), copied to Postgres by the order worker exactly once.

pub mod entries;
