//! The extended verbs of a context (`struct verbs_context`), found the way
//! rdma-core's `<infiniband/verbs.h>` inline functions find them.
//!
//! libibverbs embeds every `ibv_context` it opens as the last member of a
//! `struct verbs_context`, whose other members (laid out *before* it, the
//! table growing towards lower addresses) are the extended ops:
//! `query_port` with a length, `create_qp_ex`, `query_device_ex`, …. It
//! marks such a context by setting `abi_compat` to
//! `__VERBS_ABI_IS_EXTENDED`, `(void *)UINTPTR_MAX`, and `verbs_get_ctx`
//! steps back by `offsetof(struct verbs_context, context)` only when that
//! sentinel is there; `verbs_get_ctx_op` then takes an op only when the
//! library's table (`sz` bytes, counted back from the end) reaches it and
//! the op is set.
//!
//! rdma-sys 0.3.0's `verbs_get_ctx` compares `abi_compat` with `u32::MAX`,
//! which a 64-bit pointer never equals, so through it every extended op is
//! missing: `ibv_create_qp_ex` fails with `EOPNOTSUPP` and
//! `___ibv_query_port` always takes its compat path. [`VerbsContext`] is
//! the lookup done right; it computes each member's address back from the
//! `ibv_context` (as the C macro does) and reads a member only after the
//! size test has shown it lies inside the library's table.

use std::mem::{offset_of, size_of};
use std::ptr::NonNull;

use rdma_sys as ffi;

/// `__VERBS_ABI_IS_EXTENDED`: `(void *)UINTPTR_MAX`.
const ABI_IS_EXTENDED: usize = usize::MAX;

/// Bytes from the start of `struct verbs_context` to its `context` member,
/// which is its last (verbs.h: "Must be last field in the struct").
const CONTEXT_OFFSET: usize = offset_of!(ffi::verbs_context, context);

/// Whether an `abi_compat` value (as an address) marks a context embedded
/// in a `struct verbs_context`.
pub(crate) fn is_extended(abi_compat: usize) -> bool {
    abi_compat == ABI_IS_EXTENDED
}

/// `verbs_get_ctx_op`'s size test: a library whose `struct verbs_context`
/// is `sz` bytes has the member at `op_offset` (an offset in *our*
/// `struct verbs_context`) when `sz >= sizeof(struct verbs_context) -
/// offsetof(op)`. Members are added at the front, so an older library's
/// table is shorter and misses the newest ops; a newer one's is longer and
/// holds all of ours at the same distance from `context`.
pub(crate) fn provides(sz: usize, op_offset: usize) -> bool {
    size_of::<ffi::verbs_context>()
        .checked_sub(op_offset)
        .is_some_and(|needed| sz >= needed)
}

/// How many bytes before the `context` member the member at `op_offset`
/// starts.
const fn back_from_context(op_offset: usize) -> usize {
    CONTEXT_OFFSET - op_offset
}

/// `verbs_context::query_port`.
pub(crate) type QueryPortFn =
    unsafe extern "C" fn(*mut ffi::ibv_context, u8, *mut ffi::ibv_port_attr, usize) -> libc::c_int;

/// `verbs_context::create_qp_ex`.
pub(crate) type CreateQpExFn =
    unsafe extern "C" fn(*mut ffi::ibv_context, *mut ffi::ibv_qp_init_attr_ex) -> *mut ffi::ibv_qp;

/// The extended half of an open context: `verbs_get_ctx` done right.
///
/// Holds the `ibv_context` (not a pointer to the start of our idea of
/// `struct verbs_context`, which for an older library would lie before its
/// allocation) and the library's table size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VerbsContext {
    ctx: NonNull<ffi::ibv_context>,
    sz: usize,
}

impl VerbsContext {
    /// `verbs_get_ctx`: the extended context of `ctx`, or `None` when its
    /// `abi_compat` is not the sentinel.
    ///
    /// # Safety
    /// `ctx` must be a context opened by libibverbs (`ibv_open_device`)
    /// and still open, and stay open while the returned value is used.
    pub(crate) unsafe fn of(ctx: NonNull<ffi::ibv_context>) -> Option<Self> {
        // SAFETY: `ctx` points at a live `ibv_context` (the caller's
        // promise); `abi_compat` is a plain pointer member, read by value
        // and compared, never dereferenced.
        let abi_compat = unsafe { (*ctx.as_ptr()).abi_compat } as usize;
        if !is_extended(abi_compat) {
            return None;
        }
        let back = back_from_context(offset_of!(ffi::verbs_context, sz));
        // SAFETY: libibverbs sets the sentinel only on a context that is
        // the `context` member of a `struct verbs_context` it allocated
        // (verbs_init_context), and `sz` has sat immediately before that
        // member in every library version that sets the sentinel (verbs.h:
        // "Must be immediately before struct ibv_context"). So `ctx - back`
        // is inside the same allocation, `usize`-aligned (the struct is
        // pointer-aligned, `sz` a `size_t` member), and initialised by the
        // library to its table's size.
        let sz = unsafe { ctx.as_ptr().byte_sub(back).cast::<usize>().read() };
        Some(Self { ctx, sz })
    }

    /// The library's `struct verbs_context` size.
    #[cfg(test)]
    fn sz(&self) -> usize {
        self.sz
    }

    /// Reads the op at `op_offset` when the library's table holds it:
    /// `verbs_get_ctx_op`. `_member` only fixes `T` as that member's type
    /// (it is never called).
    fn op<T: Copy>(
        &self,
        op_offset: usize,
        _member: fn(&ffi::verbs_context) -> &Option<T>,
    ) -> Option<T> {
        if !provides(self.sz, op_offset) {
            return None;
        }
        let back = back_from_context(op_offset);
        // SAFETY: `provides` showed that the library's table, which ends
        // with the `context` member `self.ctx` points at, starts at least
        // `back` bytes before it; members keep their distance from
        // `context` across library versions (new ones are added at the
        // front). So the member lies inside the allocation `Self::of`
        // established, aligned as an `Option<fn>` is (pointer-sized, like
        // the struct's alignment), initialised by the library (null or a
        // function of the right signature, which `_member` ties `T` to),
        // and the context is still open (the contract of `Self::of`).
        unsafe { self.ctx.as_ptr().byte_sub(back).cast::<Option<T>>().read() }
    }

    /// `verbs_get_ctx_op(ctx, query_port)`.
    pub(crate) fn query_port(&self) -> Option<QueryPortFn> {
        self.op(offset_of!(ffi::verbs_context, query_port), |v| {
            &v.query_port
        })
    }

    /// `verbs_get_ctx_op(ctx, create_qp_ex)`.
    pub(crate) fn create_qp_ex(&self) -> Option<CreateQpExFn> {
        self.op(offset_of!(ffi::verbs_context, create_qp_ex), |v| {
            &v.create_qp_ex
        })
    }
}

/// `struct ibv_port_attr` as rdma-core releases with XDR support define
/// it: the bindings' (rdma-core 44) layout followed by `active_speed_ex`.
///
/// Passing its size to `verbs_context::query_port` is safe with any
/// library: one whose `ibv_port_attr` is smaller zeroes the whole buffer
/// and fills its prefix (so `active_speed_ex` stays 0), one whose is larger
/// fills a temporary and copies this many bytes (libibverbs'
/// `__lib_query_port`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PortAttrEx {
    pub(crate) attr: ffi::ibv_port_attr,
    pub(crate) active_speed_ex: u32,
}

// rdma-core's layout: `port_cap_flags2` (u16) at 48, then 2 bytes of
// padding, `active_speed_ex` at 52, 56 bytes in all.
const _: () = assert!(size_of::<ffi::ibv_port_attr>() == 52);
const _: () = assert!(offset_of!(PortAttrEx, active_speed_ex) == 52);
const _: () = assert!(size_of::<PortAttrEx>() == 56);

impl PortAttrEx {
    pub(crate) fn zeroed() -> Self {
        // SAFETY: integers and C enums (`u32`s) only; all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_uintptr_max_sentinel_marks_an_extended_context() {
        assert!(is_extended(usize::MAX));
        // rdma-sys 0.3.0 compares with this, which a 64-bit sentinel never
        // equals.
        assert!(!is_extended(u32::MAX as usize));
        assert!(!is_extended(0));
        assert_eq!(size_of::<usize>(), 8, "these tests assume a 64-bit host");
    }

    #[test]
    fn the_size_test_follows_a_table_that_grows_at_the_front() {
        let full = size_of::<ffi::verbs_context>();
        let query_port = offset_of!(ffi::verbs_context, query_port);
        let create_qp_ex = offset_of!(ffi::verbs_context, create_qp_ex);
        assert_eq!(query_port, 0, "query_port is the newest op, at the front");
        assert!(create_qp_ex > query_port);
        assert_eq!(
            CONTEXT_OFFSET + size_of::<ffi::ibv_context>(),
            full,
            "context is the last member"
        );
        assert_eq!(
            back_from_context(offset_of!(ffi::verbs_context, sz)),
            size_of::<usize>(),
            "sz sits right before context"
        );
        // The same library: everything.
        assert!(provides(full, query_port) && provides(full, create_qp_ex));
        // A newer, longer library: everything.
        assert!(provides(full + 64, query_port));
        // An older library without query_port (one pointer shorter).
        assert!(!provides(full - 8, query_port));
        assert!(provides(
            full - 8,
            offset_of!(ffi::verbs_context, advise_mr)
        ));
        assert!(provides(full - 8, create_qp_ex));
        // A table that ends before create_qp_ex.
        assert!(!provides(full - create_qp_ex - 1, create_qp_ex));
        assert!(provides(full - create_qp_ex, create_qp_ex));
    }

    unsafe extern "C" fn fake_query_port(
        _: *mut ffi::ibv_context,
        port: u8,
        attr: *mut ffi::ibv_port_attr,
        len: usize,
    ) -> libc::c_int {
        assert_eq!(len, size_of::<PortAttrEx>());
        // SAFETY: the test passes a `PortAttrEx`, `len` bytes.
        unsafe { (*attr.cast::<PortAttrEx>()).active_speed_ex = 0x100 + u32::from(port) };
        0
    }

    /// A `verbs_context` laid out as libibverbs lays one out, on the heap.
    fn fake(abi_compat: usize, sz: usize) -> Box<ffi::verbs_context> {
        // SAFETY: integers, raw pointers, `Option<fn>`s and a pthread
        // mutex's bytes: all-zero is valid for each (null, 0, `None`).
        let mut v: Box<ffi::verbs_context> = Box::new(unsafe { std::mem::zeroed() });
        v.context.abi_compat = abi_compat as *mut libc::c_void;
        v.sz = sz;
        v.query_port = Some(fake_query_port);
        v
    }

    #[test]
    fn the_lookup_steps_back_from_the_context_to_its_ops() {
        let full = size_of::<ffi::verbs_context>();
        let mut v = fake(usize::MAX, full);
        let ctx = NonNull::from(&mut v.context);
        // SAFETY: `ctx` is the `context` member of a live `verbs_context`
        // (`v`), alive across the calls.
        let vc = unsafe { VerbsContext::of(ctx) }.expect("the sentinel is set");
        assert_eq!(vc.sz(), full);
        let query = vc.query_port().expect("query_port is set");
        assert!(vc.create_qp_ex().is_none(), "an op left null is missing");
        let mut attr = PortAttrEx::zeroed();
        // SAFETY: calls the fake, with a buffer of the size passed.
        let rc = unsafe {
            query(
                ctx.as_ptr(),
                3,
                (&raw mut attr).cast(),
                size_of::<PortAttrEx>(),
            )
        };
        assert_eq!((rc, attr.active_speed_ex), (0, 0x103));

        // rdma-sys's value: not extended, nothing is looked up.
        let mut v = fake(u32::MAX as usize, full);
        // SAFETY: as above.
        assert!(unsafe { VerbsContext::of(NonNull::from(&mut v.context)) }.is_none());

        // A library whose table stops short of query_port.
        let mut v = fake(usize::MAX, full - 8);
        // SAFETY: as above.
        let vc = unsafe { VerbsContext::of(NonNull::from(&mut v.context)) }.unwrap();
        assert!(vc.query_port().is_none(), "outside the library's table");
    }
}
