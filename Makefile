# magpie: libmagpie (runtime/), magpied (daemon/), their tests and benchmarks.
#
#   make run                        install what is missing, build, start the daemon on
#                                   config/magpied.conf (RUN_ARGS='--set ...' adds options)
#   make test                       install what is missing, build and run every suite
#   make test SANITIZE=thread       the same under ThreadSanitizer      (build/tsan/)
#   make test SANITIZE=address,undefined  ... under ASan + UBSan        (build/asan/)
#   make test-repeat N=20           the suites that start threads, N times each (flakes)
#   make stress STRESS_MINUTES=30   the user-shaped runtime stress, new seeds until time is up
#   make fuzz SANITIZE=address,undefined  hostile configs, reloads, HTTP/1.1 and HTTP/2 bytes, upstreams
#   make lint                       install what is missing, clang-format check and cppcheck
#   make [all]                      build libmagpie and the programs into build/release/
#   make examples                   the guide's example programs (runtime/examples/)
#   make docs                       the reference: man pages from the public headers (build/VARIANT/docs/)
#   make ... V=1                    print each full command, not one short line per step
#   make check                      build and run every suite (installs nothing)
#   make deps | test-deps | lint-deps   install only the missing Debian packages of each list
#   make bench                      runtime benchmark against its Tokio twin (loadtest/)
#   make load                       magpie-load, the HTTP load generator (loadtest/load/)
#   make bench-http                 HTTP servers under magpie-load, every scenario (BENCH_QUICK=1)
#   make bench-all                  bench-http + runtime and fork-join comparisons, one folder
#   make install PREFIX=/usr/local DESTDIR=...   (variables below: SYSCONFDIR, SBINDIR, ...)
#   make uninstall PREFIX=... DESTDIR=...        remove what install put there
#
# Installing packages is a step of its own: run, test, test-repeat and lint run it as one make
# and then build in another, so that no rule depends on files that appear while the same make
# runs (the llhttp sources, say: make matched its rules before apt-get put them there). Every
# other target installs nothing; one that builds stops at once, naming what is missing.
# .ci/deps.sh installs as root, with --no-install-recommends, only what is missing, starting
# and leaving enabled no service; otherwise it prints the apt-get line to run.
#
# Jobs: one per CPU unless the command line says otherwise (`make -j1`). GNU make 4.3 does not
# show a command line's -j to the makefile, so the default is set in the outermost make only
# (MAKELEVEL 0), where a command line's -j still wins; the recursive makes share its jobserver.
ifeq ($(MAKELEVEL),0)
  MAKEFLAGS += -j$(shell nproc)
endif

SANITIZE ?=
PREFIX   ?= /usr/local
DESTDIR  ?=
CC       ?= cc
# Where `make install` puts things: every path below is under $(PREFIX) unless set otherwise.
# The configuration's folder is $(PREFIX)/etc, and /etc for PREFIX=/usr (a distribution's
# package); the installed magpied's default -c, its man pages and the systemd units name the
# configuration there (MAGPIED_CONF).
ifeq ($(PREFIX),/usr)
  SYSCONFDIR ?= /etc
else
  SYSCONFDIR ?= $(PREFIX)/etc
endif
MAGPIED_CONF := $(SYSCONFDIR)/magpied/magpied.conf
SBINDIR  ?= $(PREFIX)/sbin
LIBDIR   ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR   ?= $(PREFIX)/share/man
DOCDIR   ?= $(PREFIX)/share/doc/magpied
# libmagpie's guide (runtime/README.md, DESIGN.md) and its example programs.
LIBDOCDIR ?= $(PREFIX)/share/doc/magpie
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system

# libmagpie's version, in one place: MP_VERSION_MAJOR/MINOR/PATCH in magpie_core.h. The
# shared library's name, its SONAME and the .pc files take it from there. SOVERSION is the
# ABI's version, derived by semver: from 1.0 the major (a release that breaks the ABI raises
# it); before 1.0 any minor may break it (0.2 did: mp_tcp and the other socket objects no
# longer hold libuv's types, mp_task grew its deadline; 0.3 did: they hold no libuv handle,
# and are smaller; 0.4 did: mp_tcp lost mp_tcp_accept()'s handle pointer and keeps its buffer
# offsets in 32 bits), so it is 0.MINOR, as libuv 0.10's libuv.so.0.10 was, and a program
# linked against 0.3 is not loaded with 0.4.
VERSION   := $(shell sed -n 's/^.define MP_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9][0-9]*\)$$/\2/p' \
	       runtime/include/magpie_core.h | paste -sd.)
ifeq ($(filter 3,$(words $(subst ., ,$(VERSION)))),)
  $(error no MP_VERSION_MAJOR/MINOR/PATCH in runtime/include/magpie_core.h (read '$(VERSION)'))
endif
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
VERSION_MINOR := $(word 2,$(subst ., ,$(VERSION)))
SOVERSION := $(if $(filter 0,$(VERSION_MAJOR)),0.$(VERSION_MINOR),$(VERSION_MAJOR))

# The variant follows SANITIZE; VARIANT=tsan alone would build release flags into build/tsan,
# and a later SANITIZE=thread build would link those uninstrumented objects.
ifeq ($(origin VARIANT),command line)
  $(error set SANITIZE=thread or SANITIZE=address,undefined, not VARIANT)
endif
ifeq ($(SANITIZE),)
  VARIANT   := release
  OPT       := -O2
  # GCC's link-time optimisation for magpied: the calls between files (daemon into runtime,
  # llhttp into its callbacks, the runtime's own files) inline as within one file, ~13% fewer
  # instructions per request (loadtest/README.md). The objects stay fat, so the test programs,
  # libmagpie.a's users and other compilers can link their ordinary code; LTO=0 turns it off.
  ifneq ($(LTO),0)
    ifneq ($(findstring Free Software Foundation,$(shell $(CC) --version 2>/dev/null)),)
      LTO_CFLAGS := -flto=auto -ffat-lto-objects
      LTO_LINK   := -flto=auto
      # GCC's linker plugin optimises again at any link that meets LTO objects unless told
      # not to (-fno-lto): each test program redid the whole library's, four times the CPU
      # of a plain link for a daemon test, most of the release build's time.
      NO_LTO     := -fno-lto
    endif
  endif
else ifeq ($(SANITIZE),thread)
  VARIANT   := tsan
  OPT       := -O1 -fsanitize=thread
  # Criterion cannot place its arena under TSan without this (see the file). Linked as an
  # object: compiled on each test's command line, its dependencies overwrote the test's own
  # in the .d file, and a changed test header then rebuilt no TSan suite.
  TEST_EXTRA = $(B)/obj/tests/tsan_arena.o
  TEST_EXTRA_DEP = $(B)/obj/tests/tsan_arena.o
else ifeq ($(SANITIZE),address,undefined)
  VARIANT   := asan
  OPT       := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
  $(error SANITIZE must be empty, thread, or address,undefined)
endif

B := build/$(VARIANT)

# One short line per step ("CC runtime/src/task.c"); V=1 prints the full commands instead.
V ?= 0
ifeq ($(V),1)
  Q :=
  quiet =
else
  Q := @
  quiet = @printf '  %-5s %s\n' '$(1)' '$(2)'
endif

WARN   := -Wall -Wextra -Wstrict-prototypes -Wshadow
ifneq ($(filter true 1,$(CI) $(WERROR)),)
  WARN += -Werror
endif
# The test programs, the 4-slot ring's objects and the shared library's are compiled and linked
# without LTO (CFLAGS_NOLTO, NO_LTO): an LTO link per test program would redo the whole library
# each time, and only magpied and magpie-load are linked with it.
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g -pthread $(OPT) $(WARN) -MMD -MP $(CFLAGS)
CFLAGS_NOLTO := $(CFLAGS_BASE) $(NO_LTO)
CFLAGS_ALL := $(CFLAGS_BASE) $(LTO_CFLAGS)
LDFLAGS_ALL := -pthread $(OPT) $(LDFLAGS)

RT_INC   := -Iruntime/include -Iruntime/src
RT_SRCS  := $(sort $(wildcard runtime/src/*.c runtime/src/sync/*.c runtime/src/pool/*.c))
RT_OBJS  := $(RT_SRCS:%.c=$(B)/obj/%.o)
# The same runtime with a 4-slot ring, to widen interleavings in the stress tests.
RT_Q4_OBJS := $(RT_SRCS:%.c=$(B)/obj-q4/%.o)
LIB      := $(B)/libmagpie.a
LIB_Q4   := $(B)/libmagpie-q4.a
# The shared library: the same sources compiled as position-independent code, exporting the
# public mp_* API only (the mp__* internals stay local).
RT_PIC_OBJS := $(RT_SRCS:%.c=$(B)/obj-pic/%.o)
SHLIB_NAME  := libmagpie.so.$(VERSION)
SHLIB_SONAME := libmagpie.so.$(SOVERSION)
SHLIB    := $(B)/$(SHLIB_NAME)

RT_TESTS := $(sort $(wildcard tests/runtime/test_*.c tests/runtime/*/test_*.c))
RT_TEST_BINS := $(patsubst tests/runtime/%.c,$(B)/tests/runtime/%,$(RT_TESTS))
# Suites that also run against the 4-slot ring.
Q4_TESTS := queue stress task worker api_stress api_stress_io
Q4_TEST_BINS := $(Q4_TESTS:%=$(B)/tests/runtime/test_%-q4)

# The guide's programs (runtime/README.md), public headers only; tests/runtime/test_examples.c
# runs each (the network ones against loopback).
EXAMPLES := fan_out echo_server http_get udp_query dir_checksum
EX_BINS  := $(EXAMPLES:%=$(B)/examples/%)

# magpie-load (loadtest/load/): the load generator, public headers only. Its histogram and
# response framer have unit suites of their own; test_magpie_load runs it against magpied.
LOAD      := $(B)/magpie-load
LOAD_SRCS := $(sort $(wildcard loadtest/load/*.c))
LOAD_OBJS := $(LOAD_SRCS:%.c=$(B)/obj/%.o)
LOAD_LIB_OBJS := $(B)/obj/loadtest/load/hist.o $(B)/obj/loadtest/load/resp.o
LT_TESTS  := $(sort $(wildcard tests/loadtest/test_*.c))
LT_TEST_BINS := $(patsubst tests/loadtest/%.c,$(B)/tests/loadtest/%,$(LT_TESTS))

# magpied: every .c under daemon/ but main.c goes into a library the daemon tests link too.
# The folders are the layers (daemon/README.md); includes name them ("http/http.h") from -Idaemon.
# llhttp is compiled from the C sources Debian ships in node-llhttp (tests/systemd/first-run.sh
# points both folders elsewhere to replay a fresh machine).
LLHTTP_DIR  ?= /usr/share/llhttp
LLHTTP_INC_DIR ?= /usr/share/include/llhttp
LLHTTP_INC  := -I$(LLHTTP_INC_DIR)
LLHTTP_OBJS := $(B)/obj/llhttp/api.o $(B)/obj/llhttp/http.o $(B)/obj/llhttp/llhttp.o
D_DIRS   := daemon daemon/core daemon/server daemon/http daemon/http/handlers \
            daemon/http/handlers/proxy daemon/http/handlers/static
D_SRCS   := $(sort $(filter-out daemon/main.c,$(foreach d,$(D_DIRS),$(wildcard $(d)/*.c))))
D_OBJS   := $(D_SRCS:%.c=$(B)/obj/%.o)
D_LIB    := $(B)/libmagpied.a
D_INC    := $(RT_INC) -Idaemon $(LLHTTP_INC)
D_LIBS   := -luv -linih -lssl -lcrypto -lnghttp2 -lcrypt -lz -lzstd -lresolv
MAGPIED  := $(B)/magpied
# tests/daemon mirrors daemon/'s folders; tests/daemon/e2e/ holds the end-to-end suites.
D_TESTS  := $(sort $(wildcard tests/daemon/test_*.c tests/daemon/*/test_*.c tests/daemon/*/*/test_*.c \
              tests/daemon/*/*/*/test_*.c))
D_TEST_BINS := $(patsubst tests/daemon/%.c,$(B)/tests/daemon/%,$(D_TESTS))
# Packaging checks (units, man pages, make install, the HAProxy example): they run tools.
SD_TESTS := $(sort $(wildcard tests/systemd/test_*.c))
SD_TEST_BINS := $(patsubst tests/systemd/%.c,$(B)/tests/systemd/%,$(SD_TESTS))

# The shipped systemd units name /usr/sbin/magpied; `make install` renders them with
# $(SBINDIR), and tests/systemd/ with the binary just built.
UNITS := magpied.service magpied@.service magpied.socket magpied-echo.socket

# Debian packages. The build's; curl for the first request the README makes.
BUILD_DEB_PKGS := build-essential pkg-config libuv1-dev node-llhttp libinih-dev libssl-dev \
                  libnghttp2-dev libcrypt-dev zlib1g-dev libzstd-dev
DEB_PKGS := $(BUILD_DEB_PKGS) curl
# The suites': Criterion, and the tools they run: wrk, systemd-analyze and
# systemd-socket-activate, man and groff, haproxy -c (its service is left disabled), strace;
# nghttp2-client (nghttp, h2load) and python3-h2 (raw HTTP/2 frames) for the HTTP/2 suites.
TEST_DEB_PKGS := libcriterion-dev wrk systemd man-db groff-base haproxy strace openssl \
                 nghttp2-client python3-h2
LINT_DEB_PKGS := clang-format cppcheck
# The install step; tests/systemd/first-run.sh replaces it to replay a fresh machine.
DEPS ?= .ci/deps.sh

# Targets that install or only recurse need nothing yet; any other goal builds, and stops
# here when a package it builds from is missing (`make deps` installs them).
NO_BUILD_GOALS := deps test-deps lint-deps run test test-repeat stress fuzz testssl lint lint-check clean bench uninstall
ifneq ($(filter-out $(NO_BUILD_GOALS),$(or $(MAKECMDGOALS),all)),)
  MISSING_DEB_PKGS := $(strip $(shell $(DEPS) --missing $(BUILD_DEB_PKGS)))
  ifneq ($(MISSING_DEB_PKGS),)
    $(error missing Debian packages: $(MISSING_DEB_PKGS). `make deps` installs them (as root); `make run` and `make test` run it first)
  endif
endif

.PHONY: docs uninstall FORCE load bench-http bench-all examples all check header-check build-tests lint-check test test-repeat stress fuzz testssl run bench clean install lint deps test-deps lint-deps
# The release build is also reachable as build/magpied.
PROGRAMS := $(MAGPIED)
ifeq ($(VARIANT),release)
  PROGRAMS += build/magpied
endif
all: $(LIB) $(SHLIB) $(PROGRAMS) $(LOAD)

deps:
	@$(DEPS) $(DEB_PKGS)

test-deps:
	@$(DEPS) $(DEB_PKGS) $(TEST_DEB_PKGS)

lint-deps:
	@$(DEPS) $(LINT_DEB_PKGS)

# The entry points: the install step as a make of its own, then the build in another.
SUBMAKE := $(MAKE) --no-print-directory
run:
	@+$(SUBMAKE) deps
	@+$(SUBMAKE) all
	$(MAGPIED) -c config/magpied.conf $(RUN_ARGS)

test:
	@+$(SUBMAKE) test-deps
	@+$(SUBMAKE) check

lint:
	@+$(SUBMAKE) lint-deps
	@+$(SUBMAKE) lint-check

$(B)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(call quiet,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) $(RT_INC) -c $< -o $@

$(B)/obj-pic/%.o: %.c
	@mkdir -p $(@D)
	$(call quiet,CC,$< (pic))
	$(Q)$(CC) $(CFLAGS_NOLTO) -fPIC $(RT_INC) -c $< -o $@

$(B)/obj-q4/%.o: %.c
	@mkdir -p $(@D)
	$(call quiet,CC,$< (q4))
	$(Q)$(CC) $(CFLAGS_NOLTO) $(RT_INC) -DMP_QUEUE_CAPACITY=4 -c $< -o $@

# The Makefile is a prerequisite: LLHTTP_STRICT_MODE must reach objects built before it was set.
$(B)/obj/llhttp/%.o: $(LLHTTP_DIR)/%.c Makefile
	@mkdir -p $(@D)
	$(call quiet,CC,$<)
	$(Q)$(CC) -std=c11 -g $(OPT) $(LTO_CFLAGS) -MMD -MP -DLLHTTP_STRICT_MODE=1 $(LLHTTP_INC) -c $< -o $@

$(B)/obj/daemon/%.o: daemon/%.c
	@mkdir -p $(@D)
	$(call quiet,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) $(D_INC) -c $< -o $@

$(D_LIB): $(D_OBJS) $(LLHTTP_OBJS)
	@mkdir -p $(@D)
	$(call quiet,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(MAGPIED): $(B)/obj/daemon/main.o $(D_LIB) $(LIB)
	$(call quiet,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(LTO_LINK) $(D_LIBS)

build/magpied: build/release/magpied
	$(call quiet,LN,$@)
	$(Q)ln -sf release/magpied $@

$(B)/tests/daemon/%: tests/daemon/%.c $(D_LIB) $(LIB) $(TEST_EXTRA_DEP)
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) $(D_INC) -Itests $< $(TEST_EXTRA) $(D_LIB) $(LIB) -o $@ $(LDFLAGS_ALL) $(D_LIBS) -lcriterion

# The proxy suites' origin server (tests/daemon/e2e/upstream.c): a program of its own, built
# beside the suites that start it.
UPSTREAM := $(B)/tests/daemon/e2e/upstream
$(UPSTREAM): tests/daemon/e2e/upstream.c
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) $< -o $@ $(LDFLAGS_ALL)
$(filter $(B)/tests/daemon/e2e/test_proxy_%,$(D_TEST_BINS)): $(UPSTREAM)

$(LIB): $(RT_OBJS)
	@mkdir -p $(@D)
	$(call quiet,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# -z defs: every undefined symbol must come from a listed library (not with sanitizers,
# whose runtimes the executable brings).
$(SHLIB): $(RT_PIC_OBJS)
	@mkdir -p $(@D)
	$(call quiet,LD,$@)
	$(Q)printf '{\n  global: mp_[a-z]*;\n  local: *;\n};\n' > $(B)/libmagpie.map
	$(Q)$(CC) -shared -Wl,-soname,$(SHLIB_SONAME) -Wl,--version-script=$(B)/libmagpie.map \
	  $(if $(SANITIZE),,-Wl,-z,defs) $^ -o $@ $(LDFLAGS_ALL) -luv
	$(Q)ln -sf $(SHLIB_NAME) $(B)/$(SHLIB_SONAME)
	$(Q)ln -sf $(SHLIB_SONAME) $(B)/libmagpie.so

$(LIB_Q4): $(RT_Q4_OBJS)
	@mkdir -p $(@D)
	$(call quiet,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# test_udp fails chosen sends with EAGAIN, which loopback never does (see the test).
$(B)/tests/runtime/test_udp: TEST_EXTRA += -Wl,--wrap=sendto,--wrap=sendmmsg
$(B)/tests/runtime/%: tests/runtime/%.c $(LIB) $(TEST_EXTRA_DEP)
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) $(RT_INC) -Itests $< $(TEST_EXTRA) $(LIB) -o $@ $(LDFLAGS_ALL) -luv -lcriterion

$(B)/tests/runtime/%-q4: tests/runtime/%.c $(LIB_Q4) $(TEST_EXTRA_DEP)
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) $(RT_INC) -Itests -DMP_QUEUE_CAPACITY=4 $< $(TEST_EXTRA) $(LIB_Q4) -o $@ $(LDFLAGS_ALL) -luv -lcriterion

# Run from the repository root; they know their build and how it was sanitized.
$(B)/tests/systemd/%: tests/systemd/%.c $(D_LIB) $(LIB) $(TEST_EXTRA_DEP)
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) $(D_INC) -Itests -DTEST_BUILD_DIR='"$(B)"' -DTEST_SANITIZE='"$(SANITIZE)"' \
	  $< $(TEST_EXTRA) $(D_LIB) $(LIB) -o $@ $(LDFLAGS_ALL) $(D_LIBS) -lcriterion

examples: $(EX_BINS)
$(B)/examples/%: runtime/examples/%.c $(LIB)
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) -Iruntime/include $< $(LIB) -o $@ $(LDFLAGS_ALL) -luv

$(B)/tests/runtime/test_examples: tests/runtime/test_examples.c $(LIB) $(EX_BINS) $(TEST_EXTRA_DEP)
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) $(RT_INC) -Itests -DEXAMPLES_DIR='"$(B)/examples"' $< $(TEST_EXTRA) $(LIB) -o $@ $(LDFLAGS_ALL) -luv -lcriterion

load: $(LOAD)
$(B)/obj/loadtest/load/%.o: loadtest/load/%.c
	@mkdir -p $(@D)
	$(call quiet,CC,$<)
	$(Q)$(CC) $(CFLAGS_NOLTO) -Iruntime/include -Iloadtest/load -c $< -o $@
$(LOAD): $(LOAD_OBJS) $(LIB)
	$(call quiet,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(LTO_LINK) -luv -lssl -lcrypto
$(B)/tests/loadtest/%: tests/loadtest/%.c $(LOAD_LIB_OBJS) $(TEST_EXTRA_DEP)
	@mkdir -p $(@D)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_NOLTO) -Iloadtest/load -Iruntime/include -Itests -DTEST_BUILD_DIR='"$(B)"' $< $(TEST_EXTRA) \
	  $(LOAD_LIB_OBJS) -o $@ $(LDFLAGS_ALL) -lcriterion
# The smoke run needs the programs it starts.
$(B)/tests/loadtest/test_magpie_load: $(LOAD) $(PROGRAMS)

TEST_BINS := $(RT_TEST_BINS) $(Q4_TEST_BINS) $(D_TEST_BINS) $(SD_TEST_BINS) $(LT_TEST_BINS)
build-tests: $(TEST_BINS) $(UPSTREAM) $(PROGRAMS) $(SHLIB) $(EX_BINS) $(LOAD)

check: build-tests header-check docs
	@tests/run-suites.sh $(VARIANT) $(TEST_BINS)

# The public headers need C11 and pthreads only, and no libuv header: tests/header/ builds
# their users with -std=c11 -pedantic -Werror, no feature macros, and a uv.h first on the
# include path that fails the build if anything reaches it; the pool-only one is linked without
# libuv and run, the one of magpie.h (io_only.c) linked with it and run.
HDR := $(B)/header-check
HDR_CFLAGS := -std=c11 -pedantic -Wall -Wextra -Werror -g $(OPT) -I$(HDR) -Iruntime/include
$(HDR)/uv.h:
	@mkdir -p $(@D)
	$(call quiet,GEN,$@)
	$(Q)printf '#error "magpie_core.h must not need uv.h"\n' > $@
$(HDR)/core_only.o: tests/header/core_only.c runtime/include/magpie_core.h $(HDR)/uv.h
	$(call quiet,CC,$<)
	$(Q)$(CC) $(HDR_CFLAGS) -c $< -o $@
$(HDR)/pool_only: tests/header/pool_only.c runtime/include/magpie_core.h $(HDR)/uv.h $(LIB)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(HDR_CFLAGS) $< $(LIB) -o $@ -pthread $(OPT) $(NO_LTO)
$(HDR)/io_only: tests/header/io_only.c $(wildcard runtime/include/*.h) $(HDR)/uv.h $(LIB)
	$(call quiet,CCLD,$@)
	$(Q)$(CC) $(HDR_CFLAGS) $< $(LIB) -o $@ -pthread $(OPT) $(NO_LTO) -luv
header-check: $(HDR)/core_only.o $(HDR)/pool_only $(HDR)/io_only
	$(HDR)/pool_only
	$(HDR)/io_only
	@echo "[$(VARIANT)] header check: magpie_core.h and magpie.h stand alone (C11, no uv.h)"

# The suites whose tests start threads (a runtime, a pool, threads of their own, or magpied),
# for `make test-repeat N=...`: a race that fails one run in fifty shows up before it lands.
THREAD_TESTS := $(shell grep -lE 'mp_runtime_new|test_runtime|mp_pool_new|pthread_create|magpied_harness\.h|proxy_harness\.h' \
	$(RT_TESTS) $(D_TESTS) $(LT_TESTS) 2>/dev/null)
THREAD_TEST_BINS := $(patsubst tests/%.c,$(B)/tests/%,$(THREAD_TESTS)) \
	$(filter $(patsubst tests/%.c,$(B)/tests/%-q4,$(THREAD_TESTS)),$(Q4_TEST_BINS))
N ?= 20
test-repeat:
	@+$(SUBMAKE) test-deps
	@+$(SUBMAKE) $(THREAD_TEST_BINS)
	@tests/run-suites.sh --repeat $(N) $(VARIANT) $(THREAD_TEST_BINS)

# The user-shaped stress (tests/runtime/test_api_stress.c, also with the 4-slot ring) for
# minutes, a new seed each run: `make stress SANITIZE=thread STRESS_MINUTES=30`.
STRESS_MINUTES ?= 10
STRESS_WORKERS ?= 1,2,4,16
STRESS_BINS := $(B)/tests/runtime/test_api_stress $(B)/tests/runtime/test_api_stress-q4 \
	$(B)/tests/runtime/test_api_stress_io $(B)/tests/runtime/test_api_stress_io-q4
stress:
	@+$(SUBMAKE) test-deps
	@+$(SUBMAKE) $(STRESS_BINS)
	@tests/stress.sh $(STRESS_MINUTES) $(STRESS_WORKERS) $(STRESS_BINS)

# Hostile configurations, reloads, HTTP/1.1 bytes, HTTP/2 frames (h2c and over TLS) and upstream responses against magpied
# (tests/fuzz/fuzz.py), a new seed each run: `make fuzz SANITIZE=address,undefined FUZZ_CASES=2000`.
FUZZ_CASES ?= 300
# testssl.sh against the [https] listener of config/magpied-tls.conf (tests/tls/testssl.sh):
# fails on a finding rated HIGH or CRITICAL. Minutes long, so not part of `make test`.
testssl:
	@+$(SUBMAKE) test-deps
	@$(DEPS) testssl.sh
	@+$(SUBMAKE) $(MAGPIED)
	tests/tls/testssl.sh $(MAGPIED)

fuzz:
	@+$(SUBMAKE) test-deps
	@+$(SUBMAKE) $(MAGPIED)
	@seed=$$(date +%s); for kind in config reload h1 h2 h2tls upstream; do \
	    /usr/bin/python3 tests/fuzz/fuzz.py $(MAGPIED) $$kind $(FUZZ_CASES) $$seed || exit 1; done

bench:
	loadtest/runtime/compare.sh

# magpied, nginx, Tokio + hyper and Go under magpie-load, every scenario (BENCH_QUICK=1: one
# closed-loop, open-loop, static-file and idle-memory run per server); loadtest/load/README.md.
bench-http: all
	loadtest/load/bench-http.sh

# bench-http, then the runtime (sched, sync, io) and fork-join comparisons, into one
# build/bench/STAMP/ with summary.md and the plots (BENCH_QUICK=1: every step's short mode).
bench-all: all
	loadtest/bench-all.sh

# The reference: a man page per group of the public API (runtime/doc/pages.txt), generated
# from the public headers' comments, and one per function that opens its group's.
DOCS := $(B)/docs
docs: $(DOCS)/man3/magpie.3
$(DOCS)/man3/magpie.3: runtime/doc/gen-man.sh runtime/doc/pages.txt runtime/doc/magpie.3.in \
		$(wildcard runtime/include/*.h)
	$(call quiet,GEN,$(DOCS)/man3)
	$(Q)rm -rf $(DOCS)/man3 && runtime/doc/gen-man.sh $(DOCS) $(VERSION)
MAN3_PAGES = $(shell runtime/doc/gen-man.sh --list)
EXAMPLE_SRCS := $(EXAMPLES:%=runtime/examples/%.c)

# The installed magpied: the build's daemon, with its default -c at the installed configuration
# ($(MAGPIED_CONF)) where the build's own keeps main.c's /etc/magpied/magpied.conf. A file holding
# that path rebuilds it when an install names another, and the build's magpied, which the suites
# run, is never relinked by an install.
INST := $(B)/install
$(INST)/conf-path: FORCE
	@mkdir -p $(@D)
	@echo '$(MAGPIED_CONF)' | cmp -s - $@ || echo '$(MAGPIED_CONF)' > $@
$(INST)/main.o: daemon/main.c $(INST)/conf-path
	$(call quiet,CC,$< (-c $(MAGPIED_CONF)))
	$(Q)$(CC) $(CFLAGS_ALL) $(D_INC) -DMAGPIED_CONF='"$(MAGPIED_CONF)"' -c $< -o $@
$(INST)/magpied: $(INST)/main.o $(D_LIB) $(LIB)
	$(call quiet,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(LTO_LINK) $(D_LIBS)
FORCE:

# What names the installed paths: the units and man pages say /usr/sbin/magpied and
# /etc/magpied/ (a PREFIX=/usr install); install writes them with SBINDIR and SYSCONFDIR.
RENDER := sed -e 's|/usr/sbin/magpied|$(SBINDIR)/magpied|g' -e 's|/etc/magpied/|$(SYSCONFDIR)/magpied/|g'
# The .pc files carry the paths, the version, and an rpath for a prefix outside the loader's
# search path: cc prog.c $$(pkg-config --cflags --libs magpie) $$(pkg-config --variable=rpath magpie)
RENDER_PC := sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g'
# Every file install puts in place but the configuration (which it may keep, see below);
# uninstall removes these.
INSTALL_FILES := $(LIBDIR)/libmagpie.a $(LIBDIR)/$(SHLIB_NAME) $(LIBDIR)/$(SHLIB_SONAME) \
	$(LIBDIR)/libmagpie.so $(addprefix $(INCLUDEDIR)/,magpie.h magpie_core.h magpie_io.h) \
	$(LIBDIR)/pkgconfig/magpie.pc $(LIBDIR)/pkgconfig/magpie-static.pc $(SBINDIR)/magpied \
	$(addprefix $(SYSTEMD_UNIT_DIR)/,$(UNITS)) $(MANDIR)/man8/magpied.8 \
	$(MANDIR)/man5/magpied.conf.5 $(DOCDIR)/haproxy.cfg.example \
	$(addprefix $(LIBDOCDIR)/,README.md DESIGN.md) $(addprefix $(LIBDOCDIR)/,$(EXAMPLE_SRCS:runtime/%=%))
# The folders that are magpie's own, removed by uninstall once empty (lib/, include/ and the
# like stay).
INSTALL_OWN_DIRS := $(SYSCONFDIR)/magpied $(DOCDIR) $(LIBDOCDIR)/examples $(LIBDOCDIR)
# The loader's cache is refreshed only when the library went to a folder the loader's cache
# covers (/usr/lib, /lib, or one its configuration names: /usr/local/lib on Debian) and no
# DESTDIR stages it: an install elsewhere writes nothing outside its prefix. LDCONFIG= skips it.
LDCONFIG ?= ldconfig
LDCONFIG_COVERS = $(filter /usr/lib /lib,$(LIBDIR))$(shell grep -qsx '$(LIBDIR)/\?' \
	/etc/ld.so.conf /etc/ld.so.conf.d/*.conf && echo y)
LDCONFIG_RUN = $(if $(DESTDIR),,$(if $(LDCONFIG),$(if $(LDCONFIG_COVERS),$(LDCONFIG))))

# A packager's `make install DESTDIR=...` gets every file. Installing onto the live system
# (no DESTDIR) keeps an existing $(MAGPIED_CONF), and leaves `systemctl daemon-reload` to
# the administrator.
install: $(LIB) $(SHLIB) $(INST)/magpied docs
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/libmagpie.a
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/$(SHLIB_NAME)
	ln -sf $(SHLIB_NAME) $(DESTDIR)$(LIBDIR)/$(SHLIB_SONAME)
	ln -sf $(SHLIB_SONAME) $(DESTDIR)$(LIBDIR)/libmagpie.so
	install -m 644 runtime/include/magpie.h runtime/include/magpie_core.h \
	  runtime/include/magpie_io.h $(DESTDIR)$(INCLUDEDIR)/
	$(RENDER_PC) runtime/magpie.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/magpie.pc
	$(RENDER_PC) runtime/magpie-static.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/magpie-static.pc
	install -D -m 755 $(INST)/magpied $(DESTDIR)$(SBINDIR)/magpied
	@if [ -z "$(DESTDIR)" ] && [ -e $(MAGPIED_CONF) ]; then \
	  echo "keeping $(MAGPIED_CONF) (the shipped default is config/magpied.conf)"; \
	else \
	  echo "install -D -m 644 config/magpied.conf $(DESTDIR)$(MAGPIED_CONF)"; \
	  install -D -m 644 config/magpied.conf $(DESTDIR)$(MAGPIED_CONF); \
	fi
	install -d $(DESTDIR)$(SYSTEMD_UNIT_DIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man5
	for u in $(UNITS); do \
	  $(RENDER) systemd/$$u > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$u && \
	  chmod 644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$u || exit 1; \
	done
	$(RENDER) daemon/magpied.8 > $(DESTDIR)$(MANDIR)/man8/magpied.8
	$(RENDER) config/magpied.conf.5 > $(DESTDIR)$(MANDIR)/man5/magpied.conf.5
	chmod 644 $(DESTDIR)$(MANDIR)/man8/magpied.8 $(DESTDIR)$(MANDIR)/man5/magpied.conf.5
	install -D -m 644 config/haproxy.cfg.example $(DESTDIR)$(DOCDIR)/haproxy.cfg.example
	install -d $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(LIBDOCDIR)/examples
	install -m 644 $(DOCS)/man3/*.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 644 runtime/README.md runtime/DESIGN.md $(DESTDIR)$(LIBDOCDIR)/
	install -m 644 $(EXAMPLE_SRCS) $(DESTDIR)$(LIBDOCDIR)/examples/
	$(if $(LDCONFIG_RUN),-$(LDCONFIG_RUN))

# The configuration goes only while it is the shipped one (an edited one is kept, and said so).
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALL_FILES))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man3/,$(MAN3_PAGES))
	@if [ -e $(DESTDIR)$(MAGPIED_CONF) ] && ! cmp -s config/magpied.conf $(DESTDIR)$(MAGPIED_CONF); then \
	  echo "keeping $(DESTDIR)$(MAGPIED_CONF): it differs from the shipped one"; \
	else \
	  echo "rm -f $(DESTDIR)$(MAGPIED_CONF)"; rm -f $(DESTDIR)$(MAGPIED_CONF); \
	fi
	-rmdir $(addprefix $(DESTDIR),$(INSTALL_OWN_DIRS)) 2>/dev/null
	$(if $(LDCONFIG_RUN),-$(LDCONFIG_RUN))

LINT_SRCS := $(shell find runtime daemon tests loadtest -name '*.[ch]' 2>/dev/null)
# check-refs.sh: every "pairs with f()" / "see f()" in a comment names something that exists;
# test-check-refs.sh shows it fails, naming FILE:LINE, on one that does not. check-docs.sh:
# every public function has a documentation comment (test-check-docs.sh: its failure).
lint-check:
	clang-format --dry-run --Werror $(LINT_SRCS)
	tests/lint/check-refs.sh
	tests/lint/test-check-refs.sh
	tests/lint/check-docs.sh
	tests/lint/test-check-docs.sh
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem --inline-suppr -D_GNU_SOURCE $(RT_INC) runtime/src
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem --inline-suppr -D_GNU_SOURCE $(D_INC) daemon

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)
