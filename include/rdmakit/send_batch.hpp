#pragma once
/// Post lists: `auto batch = qp.make_batch<32>(); (void)batch.add(op::write{src, dst}, id);
/// post_result r = qp.post(batch);` posts every WR with one doorbell. The same operation values as
/// queue_pair::post, checked against the transport at compile time.
#include <rdmakit/backend.hpp>
#include <rdmakit/detail/operation_calls.hpp>
#include <rdmakit/detail/qp_parts.hpp>
#include <rdmakit/detail/sge_list.hpp>
#include <rdmakit/operations.hpp>
#include <rdmakit/signaling.hpp>
#include <rdmakit/transport.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

RDMAKIT_BEGIN_NAMESPACE

template <verbs_backend B, transport T, signaling S, qp_state State>
class queue_pair;
template <verbs_backend B, transport T, std::size_t Max, std::size_t SgePerWr = 1, bool SignalEach = false>
class send_batch;

/// A post list: several WRs posted with one doorbell by queue_pair::post. The
/// operations check the transport at compile time like the queue pair's own. Each WR
/// has room for SgePerWr SGEs; its native WR is built when it is added.
/// The operations are also member functions (`batch.write(src, dst, wr_id)`, ...:
/// detail/operation_calls.hpp), each the same as `batch.add(op::write{src, dst}, wr_id)`.
///
/// SignalEach: the batch's WRs are built signaled, as make_batch() of a queue pair whose
/// policy signals every WR (signal_all) makes them, so that post needs no pass over them.
template <verbs_backend B, transport T, std::size_t Max, std::size_t SgePerWr, bool SignalEach>
class send_batch : public detail::operation_calls<send_batch<B, T, Max, SgePerWr, SignalEach>, B> {
  static_assert(Max >= 1 && SgePerWr >= 1, "send_batch needs Max >= 1 and SgePerWr >= 1");

 public:
  /// An empty list (its storage is left uninitialized until WRs are added).
  send_batch() noexcept {
    if constexpr (!SignalEach) signal_key_ = no_signal_key;  // (a list built signaled is never keyed)
    if constexpr (T::needs_ah) tickets_.one.record = no_address_();
  }
  /// Not copyable or movable: its WRs point at its own SGEs and at each other, so a
  /// batch lives where make_batch() made it (`auto b = qp.make_batch<32>();`).
  send_batch(const send_batch&) = delete;  // a batch's WRs point into the batch itself
  send_batch& operator=(const send_batch&) = delete;
  /// WRs in the list.
  std::size_t size() const noexcept { return end_ / sizeof(slot_) - first_; }
  /// How many of its WRs take a receive at the other end (takes_receive): the receives
  /// the peer needs posted before the list goes. Reads each WR: not for the data path.
  std::size_t receives_needed() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = first_, end = first_ + size(); i < end; ++i)
      n += takes_receive(B::describe_send(slots_.data()[i].wr).op) ? 1 : 0;
    return n;
  }
  /// True when no WR was added since the last clear or post.
  bool empty() const noexcept { return end_ == first_ * sizeof(slot_); }
  /// True when add refuses more: Max WRs were added since the list was last emptied
  /// (after a partial post, the WRs posted keep their room until then).
  bool full() const noexcept { return end_ == Max * sizeof(slot_); }
  /// Empties the list without posting it.
  void clear() noexcept {
    if constexpr (T::needs_ah) {
      largest_ = {};
      tickets_.one.record = no_address_();
    }
    end_ = first_ = 0;
    ended_ = nullptr;
    odd_ = 0;
    min_inline_end_ = ~std::size_t{0};
    signaled_ = {};
    signal_key_ = no_signal_key;
  }

  /// Keeps the WRs after a post: every later queue_pair::post(batch) posts the same WRs
  /// again, with the same wr_ids, rewriting only the send flags whose signaling
  /// changed (the perftest way: a list built once). Without it a post empties the
  /// batch. After a partial post the batch holds the WRs that were not posted, as it
  /// would without reuse; clear() empties it (reuse stays on). Not for UD: its WRs name address
  /// handles the batch does not own. Nor does it own its WRs' buffers: their regions must
  /// outlive its posts (docs/memory.md, Buffer lifetime; inline data is read at post).
  void reuse() noexcept {
    static_assert(!T::needs_ah,
                  "a UD post list cannot be reused: its WRs name address handles the batch does not own");
    if (!reuse_) {  // what only a reused list reads starts here (a list made and posted once skips it)
      signaled_ = {};
      ended_ = nullptr;
    }
    reuse_ = true;
  }
  /// True when post() leaves the WRs in the batch (reuse()).
  bool reused() const noexcept { return reuse_; }

  /// Adds one operation (rdmakit/operations.hpp), the same value queue_pair::post
  /// takes; false only when the batch is full. Checked against the transport at compile
  /// time. An operation post cannot take is added too, and post then refuses the whole
  /// list until clear(): a wr_id using bit 63 (bad_wr_id), more SGEs than a WR of this
  /// batch holds (SgePerWr; post_rule::sge_count) or SGEs adding up to more than 2 GiB
  /// (post_rule::message_size; a single buffer above 2 GiB is the device's to refuse,
  /// docs/errors.md: a test per add would cost every list).
  template <operation Op>
  [[nodiscard]] RDMAKIT_ALWAYS_INLINE bool add(const Op& o, std::uint64_t wr_id,
                                               send_flags flags = send_flags::none) noexcept {
    Op::rule::template check<T>();
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o.local)>, local_buffer>)
      return add_(Op::code, {&o.local, 1}, wr_id, flags, o);
    else
      return add_(Op::code, o.local, wr_id, flags, o);
  }

 private:
  template <verbs_backend, transport, signaling, qp_state>
  friend class queue_pair;
  friend class detail::operation_calls<send_batch, B>;

  // One bit per WR slot: which are signaled (signaled_, and a post's plan).
  static constexpr std::size_t signal_words = (Max + 63) / 64;
  using signal_bits = std::array<std::uint64_t, signal_words>;

  template <class Op>
  RDMAKIT_ALWAYS_INLINE bool submit_(const Op& o, std::uint64_t wr_id, send_flags flags) noexcept {
    return add(o, wr_id, flags);
  }

  // After a partial post: the first k WRs are gone, the rest stay where they are (still
  // chained), so nothing moves and no pointer into the batch changes.
  void drop_front_(std::size_t k) noexcept {
    relink_();
    first_ += k;
    odd_ |= odd_touched;  // their flags were set by the refused post
    signal_key_ = no_signal_key;
  }
  // Post may set only the signaled WRs' flags when odd_ is 0 (no WR asked for a signal,
  // every flag is still as added) and no WR can go inline within `inline_limit`. The
  // smallest inline candidate is found here (add does not track it, so a queue pair
  // without inline data never pays for it) and kept until a WR is added, so a reused
  // list looks once.
  bool inline_free_(std::uint32_t inline_limit) noexcept {
    if (inline_limit == 0) return true;
    if (RDMAKIT_UNLIKELY(min_inline_end_ != end_)) {
      // A first WR that goes inline settles it without the scan: small messages on a
      // queue pair that takes inline data, whose every flag post then writes anyway.
      // (Nothing is kept: the smallest candidate is not known.)
      if (front_()->entry.inline_bytes <= inline_limit) return false;
      std::uint32_t m = detail::batch_entry::never_inline;
      for (const slot_* s = front_(); s != slot_at_(end_); ++s) m = s->entry.inline_bytes < m ? s->entry.inline_bytes : m;
      min_inline_ = m;
      min_inline_end_ = end_;
    }
    return min_inline_ > inline_limit;
  }
  // Post refuses the list: a wr_id used bit 63, a WR had more SGEs than SgePerWr or
  // SGEs adding up to more than 2 GiB.
  bool refused_() const noexcept { return (odd_ & (odd_bad_id | odd_too_many_sges | odd_too_long)) != 0; }
  RDMAKIT_NOINLINE post_result refusal_() const noexcept {
    if (odd_ & odd_bad_id) return {post_status::bad_wr_id, 0, 0};
    return detail::refused_list((odd_ & odd_too_many_sges) ? post_rule::sge_count : post_rule::message_size);
  }
  // UD: why the list's WRs cannot go from a queue pair of protection domain `pd` whose
  // port carries `mtu` bytes a packet, in one pass: a handle destroyed since its WR was
  // added (stale_address) before a handle of another PD (post_rule::address_pd) before
  // a WR larger than a datagram (post_rule::ud_mtu); ok when none.
  // A list whose WRs all name one address (tickets_.one) checks it once: its record's
  // generation and PD are the same for every WR. (Never called on an empty list.)
  RDMAKIT_ALWAYS_INLINE post_result address_refusal_(const void* pd, std::uint32_t mtu) const noexcept {
    if (RDMAKIT_LIKELY(tickets_.one.record != nullptr)) {
      if (RDMAKIT_UNLIKELY(!tickets_.one.live())) return {post_status::stale_address, 0, 0};
      if (RDMAKIT_UNLIKELY(!tickets_.one.in_pd(pd))) return detail::refused_list(post_rule::address_pd);
    } else if (const post_result r = mixed_address_refusal_(pd); !r.ok()) {
      return r;
    }
    return RDMAKIT_UNLIKELY(largest_.bytes > mtu) ? detail::refused_list(post_rule::ud_mtu) : post_result{};
  }
  // address_refusal_ of a list naming several addresses: each WR's checked.
  RDMAKIT_NOINLINE post_result mixed_address_refusal_(const void* pd) const noexcept {
    const detail::ah_ticket<B>* t = tickets_.each.data();
    bool other_pd = false;
    for (std::size_t i = first_, end = end_ / sizeof(slot_); i < end; ++i) {
      if (!t[i].live()) return {post_status::stale_address, 0, 0};
      other_pd = other_pd || !t[i].in_pd(pd);
    }
    if (other_pd) return detail::refused_list(post_rule::address_pd);
    return {};
  }
  // UD add: WR `i`'s address. While every WR since the list was emptied names the same
  // one, only tickets_.one holds it; the first that differs writes it into every earlier
  // WR's ticket and makes the list mixed (tickets_.one.record null), each WR's own. An
  // empty list's tickets_.one names no_address_(), which no address does: its first WR
  // takes the same out-of-line path (once a list).
  RDMAKIT_ALWAYS_INLINE void note_address_(std::size_t i, const detail::ah_ticket<B>& t) noexcept {
    if (RDMAKIT_UNLIKELY(t.record != tickets_.one.record || t.generation != tickets_.one.generation))
      note_other_address_(i, t);
  }
  RDMAKIT_NOINLINE void note_other_address_(std::size_t i, const detail::ah_ticket<B>& t) noexcept {
    if (tickets_.one.record == no_address_()) {  // the list's first WR (only clear() empties one: slot 0)
      tickets_.one = t;
      return;
    }
    if (tickets_.one.record != nullptr) {  // the first other address: the list becomes mixed
      for (std::size_t k = 0; k < i; ++k) tickets_.each[k] = tickets_.one;
      tickets_.one.record = nullptr;
    }
    tickets_.each[i] = t;
  }
  // Where one WR lives: the native WR first (a pointer to it is a pointer to its slot),
  // its SGEs and what post decides its flags by. One base address for the three: an
  // add computes one product, not one per array.
  struct slot_ {
    typename B::send_wr wr;
    typename B::sge sg[SgePerWr];
    detail::batch_entry entry;
  };
  static_assert(std::is_standard_layout_v<slot_>, "a slot's address is its WR's");
  // The slot of the first WR not posted; a list's WRs are front_()[0 .. size()).
  slot_* front_() noexcept { return slots_.data() + first_; }
  // front_() of a list with a key: only a list posted from its first slot gets one.
  slot_* keyed_front_() noexcept { return slots_.data(); }
  // The WR a post's bad_wr names, as an index from front_().
  std::size_t index_from_front_(const typename B::send_wr* wr) const noexcept {
    return static_cast<std::size_t>(reinterpret_cast<const slot_*>(wr) - (slots_.data() + first_));
  }
  // The slot `offset` bytes from the first (one past the last slot: never followed).
  slot_* slot_at_(std::size_t offset) noexcept {
    return reinterpret_cast<slot_*>(reinterpret_cast<char*>(slots_.data()) + offset);
  }
  // The WR at slot s, by address (s may be one past the last slot: never followed).
  static typename B::send_wr* wr_address_(slot_* s) noexcept { return reinterpret_cast<typename B::send_wr*>(s); }
  // The list's size as its signal key names it (queue_pair::post): end_, as only a list
  // from its first slot is keyed. Its count is then keyed_n_: no division.
  std::uint64_t key_size_() const noexcept { return end_; }  // below 2^32 when keyable
  // (A key's low 3 bits are the policy's, not the end's: sq_credits::signal_key. Slots
  // holding a pointer are a multiple of 8 bytes; a list of other slots is never keyed.)
  static constexpr bool keyable = Max * sizeof(slot_) <= ~std::uint32_t{0} && sizeof(slot_) % 8 == 0;
  // Records that every flag is now as `key` places the signals on a queue pair of
  // `inline_limit` (the fast path's test), for a list of n WRs from its first slot.
  void set_key_(std::uint64_t key, std::uint32_t inline_limit, std::size_t n) noexcept {
    signal_key_ = key;
    keyed_inline_limit_ = inline_limit;
    keyed_n_ = static_cast<std::uint32_t>(n);
  }

  // The key of a list of key_size_() under signal_manual, posted from its first slot with
  // credits for all of it: only its last WR may take the last free slot, and
  // keyed_last_signaled_ says whether it did at the last post. Bit 63 set and low 3 bits
  // 0 tell it from signal_every<N>'s keys (sq_credits::signal_key: low bits not 0, or
  // bit 63 clear), bits 32-62 clear from no_signal_key.
  std::uint64_t last_slot_key_() const noexcept { return std::uint64_t{1} << 63 | key_size_(); }
  // Keys this list, posted from its first slot, for the signal_manual path (above).
  void set_last_slot_key_(std::uint32_t inline_limit, std::size_t n) noexcept {
    set_key_(last_slot_key_(), inline_limit, n);
    keyed_last_signaled_ = (signaled_[(n - 1) / 64] >> ((n - 1) % 64)) & 1;
  }
  // Signals WR n - 1 (the last of a keyed list, where its last post ended the chain:
  // ended_) or takes its signal back.
  void set_last_signal_(std::uint32_t n, bool on) noexcept {
    const std::uint32_t k = n - 1;
    B::set_send_flags(ended_->wr, ended_->entry.flags | (on ? send_flags::signaled : send_flags::none));
    signaled_[k / 64] ^= std::uint64_t{1} << (k % 64);
    keyed_last_signaled_ = on;
  }

  // Bit i of `now`: WR i of the list (from first_) is signaled by this post.
  RDMAKIT_ALWAYS_INLINE void mark_(signal_bits& now, std::size_t i) const noexcept {
    const std::size_t k = first_ + i;
    now[k / 64] |= std::uint64_t{1} << (k % 64);
  }
  // Rewrites the flags of the WRs whose signaling differs from their last post (or from
  // how add() built them): a reused list signaled at the same places costs no store.
  RDMAKIT_ALWAYS_INLINE void apply_signals_(const signal_bits& now) noexcept {
    for (std::size_t w = 0; w < signal_words; ++w) {
      for (std::uint64_t diff = signaled_[w] ^ now[w]; diff != 0; diff &= diff - 1) {
        const std::size_t k = w * 64 + static_cast<std::size_t>(__builtin_ctzll(diff));
        const bool on = (now[w] >> (k % 64)) & 1;
        B::set_send_flags(slots_[k].wr, slots_[k].entry.flags | (on ? send_flags::signaled : send_flags::none));
      }
      signaled_[w] = now[w];
    }
  }
  const detail::batch_entry& entry_(std::size_t i) noexcept { return slots_[first_ + i].entry; }

  // Builds the native WR in place: post only sets the flags (and ends the chain). Each
  // WR points ahead at the slot after it; the counters are read once into locals, as
  // the WR's stores could otherwise alias them and force a reload after each.
  template <class Op>
  RDMAKIT_ALWAYS_INLINE bool add_(opcode op, std::span<const local_buffer> sgl, std::uint64_t wr_id, send_flags flags,
            const Op& o) noexcept {
    const std::size_t end = end_;
    if (end == Max * sizeof(slot_)) return false;
    // More SGEs than a WR here holds: the WR is kept with its first SgePerWr and post
    // refuses the list, as for a bad wr_id, so that false means full and nothing else.
    std::size_t n = sgl.size();
    if (RDMAKIT_UNLIKELY(n > SgePerWr)) {
      n = SgePerWr;
      odd_ |= odd_too_many_sges;
    }
    detail::send_desc<B> d{};
    d.op = op;
    // One SGE's length fits 32 bits; a list's sum is tested below (sge_list.hpp).
    std::conditional_t<(SgePerWr > 1), std::uint64_t, std::uint32_t> total = 0;
    slot_& slot = *slot_at_(end);
    typename B::sge* sg = slot.sg;
    for (std::size_t i = 0; i < n; ++i) {
      B::set_sge(sg[i], sgl[i].addr, sgl[i].length, sgl[i].lkey);
      total += sgl[i].length;
    }
    o.fill(d);
    if constexpr (requires { o.to; }) {
      note_address_(end / sizeof(slot_), detail::ud_address_access::ticket(o.to));
      const std::uint64_t bytes = total;  // (above 2^31 the list is refused anyway: message_size)
      if (bytes > largest_.bytes)
        largest_.bytes = bytes > detail::max_message_bytes ? ~std::uint32_t{0} : static_cast<std::uint32_t>(bytes);
    }
    auto* w = &slot.wr;
    constexpr send_flags base = SignalEach ? send_flags::signaled : send_flags::none;
    const send_flags kept = flags & ~send_flags::no_auto_inline;  // rdmakit's own flag stays here
    B::set_send(*w, wr_id, op, kept | base, sg, static_cast<int>(n));
    detail::set_op_fields<B, T>(*w, d);
    B::set_next(*w, wr_address_(&slot + 1));  // one past the last slot at most: never followed (post ends the chain)
    // (No "any candidate" flag for post: its store on every add cost more than the
    // inline limit's test it saved a post of WRs that cannot go inline.)
    std::uint32_t inline_bytes = detail::batch_entry::never_inline;
    if constexpr (SgePerWr > 1) {
      if (RDMAKIT_UNLIKELY(total > detail::max_message_bytes)) odd_ |= odd_too_long;
      else if (detail::may_auto_inline(op, flags)) inline_bytes = static_cast<std::uint32_t>(total);
    } else if (detail::may_auto_inline(op, flags)) {
      inline_bytes = total;
    }
    // One 8-byte store (GCC merges the two fields). Not memcpy: a char access, which the
    // compiler takes as touching any field (bench/README, round s31: 0.3 per WR more).
    static_assert(sizeof(detail::batch_entry) == sizeof(std::uint64_t));
    slot.entry = detail::batch_entry{kept, inline_bytes};
    odd_ |= static_cast<std::uint16_t>(to_underlying(flags) & odd_asked_signal);  // the signaled bit
    // Tested here, not or-ed into a mask for post: a wr_id whose type or range keeps
    // bit 63 clear (a 32-bit index) then costs nothing.
    if (RDMAKIT_UNLIKELY(wr_id & detail::recv_wr_bit)) odd_ |= odd_bad_id;
    end_ = end + sizeof(slot_);
    return true;
  }

  // The last WR ends the list while it is posted (queue_pair::post); relink() undoes it
  // for WRs added after a partial post.
  void relink_() noexcept {
    slot_* const end = slot_at_(end_);
    B::set_next(end[-1].wr, wr_address_(end));
    ended_ = nullptr;
  }

  detail::uninit_array<slot_, Max> slots_;
  // UD: the WRs' addresses, checked again at post: a handle may be destroyed after add.
  // `one` while every WR names the same address (what most lists do: one check per
  // post); else `each` holds every WR's, and one.record is null.
  struct no_tickets {};
  struct address_tickets {
    detail::ah_ticket<B> one;
    detail::uninit_array<detail::ah_ticket<B>, Max> each;
  };
  [[no_unique_address]] std::conditional_t<T::needs_ah, address_tickets, no_tickets> tickets_;
  // What tickets_.one names while the list is empty: a record no address points at.
  static const detail::ah_record<B>* no_address_() noexcept {
    static const detail::ah_record<B> none{};
    return &none;
  }
  // UD: the largest message added since clear(), held to the queue pair's MTU at post.
  struct largest_message {
    std::uint32_t bytes = 0;
  };
  [[no_unique_address]] std::conditional_t<T::needs_ah, largest_message, no_tickets> largest_;
  // Which WR slots are built with send_flags::signaled set (for the flags post sets):
  // a post rewrites only the slots whose bit changes. Set by reuse(): only a reused
  // list reads it.
  signal_bits signaled_;
  // Where the policy put the signals at the last post (sq_credits::signal_key): a
  // post finding the same key leaves every flag as it is. no_signal_key whenever the
  // flags were last written otherwise (clear, a partial post, a post of no key).
  static constexpr std::uint64_t no_signal_key = ~std::uint64_t{0};
  std::uint64_t signal_key_;
  // The queue pair's inline limit when signal_key_ was set: read only when that key
  // matches, so left unset until then (one store less per batch made).
  std::uint32_t keyed_inline_limit_;
  std::uint32_t keyed_n_;  // size() when signal_key_ was set (also read only when it matches)
  bool keyed_last_signaled_;  // under a last_slot_key_(): whether the last WR is signaled
  // One past the last WR added, in bytes from the first slot: an offset, not a count,
  // so that an add finds its slot without a product (3 instructions per WR added);
  // size() divides once per post instead (a keyed list's post reads keyed_n_).
  std::size_t end_ = 0;
  std::size_t first_ = 0;  // the first WR not posted yet
  // The WR a reused list's last post ended the chain at (null: none). A WR added since
  // follows it, so the next post links it again (queue_pair::post_planned_). Set by
  // reuse(): only a reused list reads it.
  slot_* ended_;
  std::uint32_t min_inline_;                      // the smallest inline candidate before min_inline_end_
  std::size_t min_inline_end_ = ~std::size_t{0};  // end_ when it was found (none yet)
  // Why post cannot take the plain path, one bit each, so that it tests them at once:
  // a wr_id used bit 63 (bad_wr_id); a WR had more SGEs than SgePerWr, or SGEs adding up
  // to more than 2 GiB; a WR was added with send_flags::signaled; the flags
  // are not as add() built them and not as signaled_ says (a partial post set those of
  // the WRs left, or a list built signaled, SignalEach, was posted under another policy).
  static constexpr std::uint16_t odd_bad_id = 1, odd_touched = 4, odd_too_many_sges = 8, odd_too_long = 16;
  static constexpr std::uint16_t odd_asked_signal = static_cast<std::uint16_t>(to_underlying(send_flags::signaled));
  static_assert((odd_asked_signal & (odd_bad_id | odd_touched | odd_too_many_sges | odd_too_long)) == 0);
  // (Not a char type, whose stores the compiler takes as touching any field.)
  std::uint16_t odd_ = 0;
  bool reuse_ = false;  // post() keeps the WRs (reuse())
};


RDMAKIT_END_NAMESPACE
