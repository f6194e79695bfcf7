//! Redis access: the connection (`connection`), key names (`keys`) and the Lua scripts (`lua`).

pub mod connection;
pub mod keys;
pub mod lua;
