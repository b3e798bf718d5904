from supervisor.core.host_boot import BootCheck, check_boot

BOOT, LATER_BOOT = "63a69a32-edd3-45b3-be5e-07eec7d31bec", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
HERE, THERE = "3d1219c7c4c5404aaa1f6d2a48adfda4", "0123456789abcdef0123456789abcdef"


def test_an_unknown_boot_id_changes_nothing_whatever_the_file_says() -> None:
    assert check_boot(BOOT, {HERE}, None, HERE) is BootCheck.UNKNOWN
    assert check_boot(BOOT, {THERE}, None, HERE) is BootCheck.UNKNOWN
    assert check_boot(None, set(), None, None) is BootCheck.UNKNOWN


def test_a_file_that_names_no_boot_takes_ours_without_expiring_anything() -> None:
    assert check_boot(None, set(), BOOT, HERE) is BootCheck.FIRST


def test_the_same_boot_is_the_same_clock_even_from_another_container() -> None:
    assert check_boot(BOOT, {HERE}, BOOT, HERE) is BootCheck.SAME_BOOT
    assert check_boot(BOOT, {THERE}, BOOT, HERE) is BootCheck.SAME_BOOT


def test_another_boot_of_a_machine_that_used_the_file_is_a_reboot() -> None:
    assert check_boot(BOOT, {HERE}, LATER_BOOT, HERE) is BootCheck.REBOOTED
    assert check_boot(BOOT, {THERE, HERE}, LATER_BOOT, HERE) is BootCheck.REBOOTED


def test_another_boot_that_cannot_be_told_from_a_reboot_is_a_reboot() -> None:
    assert check_boot(BOOT, set(), LATER_BOOT, HERE) is BootCheck.REBOOTED
    assert check_boot(BOOT, {THERE}, LATER_BOOT, None) is BootCheck.REBOOTED


def test_another_boot_of_another_machine_is_another_host() -> None:
    assert check_boot(BOOT, {THERE}, LATER_BOOT, HERE) is BootCheck.OTHER_HOST
