/* Start-up code of the STM32F405 (Cortex-M4F): the vector table and the reset handler.
 *
 * The table is RM0090 §12.2 table 61 (82 peripheral interrupts after the 16 Cortex-M4 system exceptions); only
 * the handlers the board support uses are named (bsp_stm32f405.c: SysTick, USART1), the rest trap in
 * Default_Handler. Reset_Handler enables the FPU before any float instruction can run (the firmware is built
 * with -mfloat-abi=hard: the Cortex-M4 Generic User Guide §4.6.1, CPACR CP10/CP11 full access), copies .data
 * from flash, zeroes .bss (stm32f405.ld) and calls main.
 */
#include <stdint.h>

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define CPACR_CP10_CP11_FULL (0xFu << 20)
#define N_IRQ 82

extern uint32_t _estack, _sidata, _sdata, _edata, _sbss, _ebss;
int main(void);
void Reset_Handler(void);
void SysTick_Handler(void);
void USART1_IRQHandler(void);

/* An unexpected exception or interrupt: stop here (a debugger shows which from the IPSR). */
void Default_Handler(void) {
    for (;;) {}
}

void Reset_Handler(void) {
    SCB_CPACR |= CPACR_CP10_CP11_FULL;
    __asm volatile("dsb\n\tisb" ::: "memory");       /* the FPU is usable from the next instruction on */
    const uint32_t *from = &_sidata;
    for (uint32_t *to = &_sdata; to < &_edata;) *to++ = *from++;
    for (uint32_t *to = &_sbss; to < &_ebss;) *to++ = 0;
    main();
    for (;;) {}                                       /* main returned: the rig table was refused */
}

typedef void (*vector)(void);
#define USART1_IRQ 37

/* Every slot Default_Handler, then the used ones named: the later designator overrides the range on purpose. */
#pragma GCC diagnostic ignored "-Woverride-init"

__attribute__((section(".isr_vector"), used))
const vector vector_table[16 + N_IRQ] = {
    [0] = (vector)(uintptr_t)&_estack,             /* initial main stack pointer */
    [1] = Reset_Handler,
    [2] = Default_Handler,                          /* NMI */
    [3] = Default_Handler,                          /* HardFault */
    [4] = Default_Handler,                          /* MemManage */
    [5] = Default_Handler,                          /* BusFault */
    [6] = Default_Handler,                          /* UsageFault */
    [11] = Default_Handler,                         /* SVCall */
    [12] = Default_Handler,                         /* DebugMonitor */
    [14] = Default_Handler,                         /* PendSV */
    [15] = SysTick_Handler,
    [16 ... 16 + N_IRQ - 1] = Default_Handler,
    [16 + USART1_IRQ] = USART1_IRQHandler,
};
