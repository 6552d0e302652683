#include <rdmakit/backend.hpp>

#include <doctest/doctest.h>

using namespace rdmakit;

// A backend missing one operation must not satisfy the concept.
struct missing_poll : archetype_backend {
  static int poll_cq(int) noexcept;  // wrong signature hides the archetype's
};
struct throwing_post : archetype_backend {
  static int post_send(qp, send_wr*, send_wr**);  // data path must be noexcept
};
struct fat_handle_backend : archetype_backend {
  struct fat {
    fat() = default;
    fat(const fat&) {}
    bool operator==(const fat&) const = default;
  };
  using qp = fat;  // handles must be trivially copyable
};

TEST_CASE("the archetype satisfies verbs_backend") { CHECK(verbs_backend<archetype_backend>); }

TEST_CASE("the concept rejects incomplete or wrong backends") {
  CHECK_FALSE(verbs_backend<missing_poll>);
  CHECK_FALSE(verbs_backend<throwing_post>);
  CHECK_FALSE(verbs_backend<fat_handle_backend>);
  CHECK_FALSE(verbs_backend<int>);
}

TEST_CASE("each part of the concept is checked on its own: a failure names the part") {
  CHECK_FALSE(polling_backend<missing_poll>);
  CHECK(posting_backend<missing_poll>);  // only polling is broken
  CHECK(device_backend<missing_poll>);
  CHECK_FALSE(posting_backend<throwing_post>);
  CHECK(polling_backend<throwing_post>);
  CHECK(event_backend<throwing_post>);
  CHECK_FALSE(backend_types<fat_handle_backend>);
  CHECK_FALSE(memory_backend<fat_handle_backend>);
}
